package stamp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// secretSpec consumes Secret "db" every way a pod can: a volume, a projected volume,
// envFrom and a key reference; and ConfigMap "db" by envFrom.
func secretSpec() *corev1.PodSpec {
	return &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "tls"}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj"},
					Items: []corev1.KeyToPath{{Key: "a", Path: "a"}}, Optional: ptr.To(true)}},
			}}}},
		},
		Containers: []corev1.Container{{
			Name: "c",
			EnvFrom: []corev1.EnvFromSource{
				{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "env"}}},
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}}},
			},
			Env: []corev1.EnvVar{{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "password"}}}},
		}},
	}
}

func TestConsumedSecrets(t *testing.T) {
	got := Consumed(nil, secretSpec(), Options{Secrets: true})
	want := []Source{
		{Kind: KindConfigMap, Name: "db", AllKeys: true, Required: true},
		{Kind: KindSecret, Name: "db", Keys: []string{"password"}, Required: true, RequiredKeys: []string{"password"}, RequiredEnvKeys: []string{"password"}},
		{Kind: KindSecret, Name: "env", AllKeys: true, Required: true},
		{Kind: KindSecret, Name: "proj", Keys: []string{"a"}, Binary: true},
		{Kind: KindSecret, Name: "tls", AllKeys: true, Binary: true, Required: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Consumed() =\n%#v\nwant\n%#v", got, want)
	}
	// Secrets off: as if not referenced.
	if got := Consumed(nil, secretSpec(), Options{}); len(got) != 1 || got[0].Kind != KindConfigMap {
		t.Fatalf("Secrets off: %#v, want the ConfigMap only", got)
	}
}

func TestExtraSources(t *testing.T) {
	refs, problems := ExtraSources(" configmap/a, Secret/b ,,configmap/a, cm/x, configmap/Bad_Name, configmap", Options{Secrets: true})
	wantRefs := []Ref{{KindConfigMap, "a"}, {KindSecret, "b"}, {KindConfigMap, "a"}}
	if !reflect.DeepEqual(refs, wantRefs) {
		t.Fatalf("refs = %#v, want %#v", refs, wantRefs)
	}
	if len(problems) != 3 {
		t.Fatalf("problems = %q, want three (unknown kind, invalid name, no slash)", problems)
	}
	if _, problems := ExtraSources("secret/b", Options{}); len(problems) != 1 || !strings.Contains(problems[0], "--secrets") {
		t.Fatalf("a Secret entry with Secrets off: %q", problems)
	}

	spec := &corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("K", "a", "k")}}}}
	ann := map[string]string{ExtraSourcesAnnotation: "configmap/a, configmap/sidecar, secret/s, bogus"}
	got := Consumed(ann, spec, Options{})
	want := []Source{
		// Named both ways: every key, files too; still required by the env reference.
		{Kind: KindConfigMap, Name: "a", AllKeys: true, Binary: true, Required: true, RequiredKeys: []string{"k"}, RequiredEnvKeys: []string{"k"}},
		{Kind: KindConfigMap, Name: "sidecar", AllKeys: true, Binary: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Consumed() =\n%#v\nwant\n%#v", got, want)
	}
	// A missing extra source is hashed as missing and holds nothing.
	st := mustCompute(t, got[1:])
	if len(st.Unmet()) != 0 || !st.Sources[0].Missing {
		t.Fatalf("missing extra source: %+v", st)
	}
}

// Every digest is keyed, a ConfigMap's as a Secret's: the stamp contains no unkeyed
// SHA-256 of the content or of its encoding; two keys give two digests, one key the
// same; the same content in two namespaces gives digests that cannot be compared; and
// no digest is made without a key.
func TestDigestsAreKeyed(t *testing.T) {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Data: map[string][]byte{"pin": []byte("4711")}}
	for _, kind := range []string{KindConfigMap, KindSecret} {
		t.Run(kind, func(t *testing.T) {
			src := Source{Kind: kind, Name: "db", AllKeys: true, Binary: true, Required: true}
			lookup := func(_ context.Context, k, name string) (*corev1.ConfigMap, error) {
				if k != kind || name != "db" {
					return nil, nil
				}
				return SecretContent(sec), nil
			}
			key := []byte(strings.Repeat("1", 32))
			compute := func(key []byte, ns string) Stamp {
				t.Helper()
				st, err := Compute(context.Background(), []Source{src}, lookup, NamespaceKey(key, ns))
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			st1, again := compute(key, "victim"), compute(key, "victim")
			st2, other := compute([]byte(strings.Repeat("2", 32)), "victim"), compute(key, "attacker")
			if st1.Hash != again.Hash || st1.Hash == st2.Hash || st1.Hash == other.Hash ||
				st1.SourcesAnnotation() == other.SourcesAnnotation() {
				t.Fatalf("same key: %s %s; other key: %s; other namespace: %s", st1.Hash, again.Hash, st2.Hash, other.Hash)
			}
			plain := []string{hexSum([]byte("4711")), hexSum(encodeUnkeyed(src, SecretContent(sec)))}
			stamped := st1.Hash + " " + st1.SourcesAnnotation() + " " + st1.Sources[0].Hex()
			for _, p := range plain {
				for _, prefix := range []string{p, p[:digestChars]} {
					if strings.Contains(stamped, prefix) {
						t.Fatalf("the stamp %q contains an unkeyed digest %q", stamped, prefix)
					}
				}
			}
			if !strings.HasPrefix(st1.SourcesAnnotation(), kind+"/db=") {
				t.Fatalf("sources annotation %q", st1.SourcesAnnotation())
			}
			if _, err := Compute(context.Background(), []Source{src}, lookup, nil); !errors.Is(err, ErrNoKey) {
				t.Fatalf("Compute without a key: %v, want ErrNoKey", err)
			}
			defer func() {
				if recover() == nil {
					t.Fatal("a digest without a key did not panic")
				}
			}()
			SourceDigest(src, SecretContent(sec), nil)
		})
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// encodeUnkeyed is the Secret's encoding, as an unkeyed hash would see it.
func encodeUnkeyed(src Source, cm *corev1.ConfigMap) []byte {
	var b strings.Builder
	enc := encoder{h: &recorder{b: &b}}
	enc.source(src, cm)
	return []byte(b.String())
}

// recorder is a hash.Hash that keeps what is written.
type recorder struct{ b *strings.Builder }

func (r *recorder) Write(p []byte) (int, error) { return r.b.Write(p) }
func (r *recorder) Sum(b []byte) []byte         { return b }
func (r *recorder) Reset()                      { r.b.Reset() }
func (r *recorder) Size() int                   { return 0 }
func (r *recorder) BlockSize() int              { return 1 }

// ConfigMap stamps do not change with Secrets on (no rollouts when configstamp is
// upgraded, or Secrets are turned on, for workloads consuming no Secret).
func TestConfigMapStampsIndependentOfSecrets(t *testing.T) {
	spec := &corev1.PodSpec{Volumes: []corev1.Volume{cmVolume("a")}, Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{keyRef("K", "b", "k")}}}}
	off, on := Consumed(nil, spec, Options{}), Consumed(nil, spec, Options{Secrets: true})
	if !reflect.DeepEqual(off, on) || !reflect.DeepEqual(off, References(spec)) {
		t.Fatalf("off %#v, on %#v", off, on)
	}
}
