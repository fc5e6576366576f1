package certs

import (
	"encoding/json"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
)

// TestBundlePatch: the patch touches only the entries' caBundle and configstamp's
// record, guarded by the resourceVersion and each entry's name; nothing when nothing
// changes. (test/integration TestCABundlePatchUnderSelfPolicy applies it to the real
// API server, racing another writer.)
func TestBundlePatch(t *testing.T) {
	states := map[string]caState{"ab": {Since: t0}}
	record, _ := json.Marshal(states)
	reg := func(ann map[string]string, bundles ...string) *admissionregistrationv1.MutatingWebhookConfiguration {
		r := registration()
		r.ResourceVersion = "7"
		r.Annotations = ann
		for i, b := range bundles {
			r.Webhooks[i].ClientConfig.CABundle = []byte(b)
		}
		return r
	}
	guards := `{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"test","path":"/webhooks/0/name","value":"a.configstamp.io"},{"op":"test","path":"/webhooks/1/name","value":"b.configstamp.io"}`
	for _, tc := range []struct {
		name string
		reg  *admissionregistrationv1.MutatingWebhookConfiguration
		want string
	}{
		{"unchanged", reg(map[string]string{CAsAnnotation: string(record)}, "PEM", "PEM"), ""},
		{"one entry and no annotations", reg(nil, "PEM", "old"),
			`[` + guards + `,{"op":"add","path":"/webhooks/1/clientConfig/caBundle","value":"UEVN"},{"op":"add","path":"/metadata/annotations","value":{"configstamp.io/cas":"{\"ab\":{\"since\":\"2026-01-01T00:00:00Z\"}}"}}]`},
		{"record and an earlier build's record", reg(map[string]string{"configstamp.io/retired-cas": "x", "helm": "y"}, "PEM", "PEM"),
			`[` + guards + `,{"op":"remove","path":"/metadata/annotations/configstamp.io~1retired-cas"},{"op":"add","path":"/metadata/annotations/configstamp.io~1cas","value":"{\"ab\":{\"since\":\"2026-01-01T00:00:00Z\"}}"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			patch := bundlePatch(tc.reg, []byte("PEM"), states)
			got := ""
			if patch != nil {
				b, err := json.Marshal(patch)
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
			}
			if got != tc.want {
				t.Errorf("patch\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
