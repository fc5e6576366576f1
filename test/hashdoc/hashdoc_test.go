package hashdoc

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The worked example of docs/hash.md, recomputed here: a ConfigMap app with
// app.yaml: "port: 8080\n" mounted whole, in namespace shop, under the example key; the
// same content in another namespace; and the predecessor's unkeyed v1 stamp of it.
func TestDocumentedExample(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	get := func(name string) *corev1.ConfigMap {
		if name != "app" {
			return nil
		}
		return &corev1.ConfigMap{Data: map[string]string{"app.yaml": "port: 8080\n"}}
	}
	for _, tc := range []struct {
		name, namespace string
		srcs            []Source
		want            string
	}{
		{"app", "shop", []Source{{Name: "app"}}, "a79589406f69694cb3775e550076a1f1d09ab4c00db188490903ed8729536df8"},
		{"app and gone", "shop", []Source{{Name: "app"}, {Name: "gone"}}, "7ec1cdb88fd7b6a390f35047856175a06e1bb738ff7332be5769c9cbe29b19f1"},
		{"app in another namespace", "other", []Source{{Name: "app"}}, "5187165018d9e565a97e4a91a3b07759701b6e4dd105d39996d39b7dc6accf9d"},
	} {
		if got := Hash(tc.srcs, get, key, tc.namespace); got != tc.want {
			t.Errorf("%s: %s, want %s (docs/hash.md)", tc.name, got, tc.want)
		}
	}
	if got := KeyFingerprint(key); got != "0f4dd1f41f10" { // docs/hash.md, Key fingerprint
		t.Errorf("key fingerprint %s, want the documented 0f4dd1f41f10", got)
	}
	if got, digests := V1Hash([]Source{{Name: "app"}}, get); got != "5409d94d586603de684a920ab6d91eba33ef5e0fbe32a2f2071411a267d4b0c8" || digests[0][:12] != "365a48941b08" {
		t.Errorf("v1: %s %v, want the predecessor's documented 5409d94d... 365a48941b08...", got, digests)
	}
}
