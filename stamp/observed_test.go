package stamp

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestObservedRoundTripAndValidity(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "a:1"}}}}
	o := Observed{Hash: strings.Repeat("ab", 32), Template: TemplateFingerprint(tmpl)}
	got, ok := ParseObserved(o.String())
	if !ok || got != o {
		t.Fatalf("ParseObserved(%q) = %+v, %v", o.String(), got, ok)
	}
	ann := map[string]string{ObservedAnnotation: o.String()}
	if _, ok := ObservedFor(ann, tmpl); !ok {
		t.Fatal("record not valid for its own template")
	}
	// A stamp in the template does not change the fingerprint; any other change does.
	stampedTmpl := tmpl.DeepCopy()
	stampedTmpl.Annotations = map[string]string{HashAnnotation: "x", SourcesAnnotation: "y"}
	if _, ok := ObservedFor(ann, stampedTmpl); !ok {
		t.Fatal("the stamp changed the template fingerprint")
	}
	newImage := tmpl.DeepCopy()
	newImage.Spec.Containers[0].Image = "a:2"
	if _, ok := ObservedFor(ann, newImage); ok {
		t.Fatal("record valid for another template")
	}
	for _, bad := range []string{"", "abc template=x", strings.Repeat("ab", 32), strings.Repeat("ab", 32) + " template=",
		strings.Repeat("ab", 32) + " template=x other", strings.Repeat("ab", 32) + " template= secrets"} {
		if _, ok := ParseObserved(bad); ok {
			t.Fatalf("ParseObserved(%q) accepted", bad)
		}
	}
}

// A record says whether its hash covers Secrets; it is a certain basis only while
// Secrets count for the workload as they did then.
func TestObservedSecretsFlag(t *testing.T) {
	o := Observed{Hash: strings.Repeat("ab", 32), Template: "0123456789abcdef", Secrets: true}
	if got, ok := ParseObserved(o.String()); !ok || got != o || !strings.HasSuffix(o.String(), " secrets") {
		t.Fatalf("round trip %q: %+v %v", o.String(), got, ok)
	}
	plain := Observed{Hash: o.Hash, Template: o.Template}
	if strings.Contains(plain.String(), "secrets") {
		t.Fatalf("a ConfigMap-only record carries the flag: %q", plain.String())
	}
	cms := []Source{{Kind: KindConfigMap, Name: "a"}}
	withSecret := append(cms, Source{Kind: KindSecret, Name: "b"})
	for _, c := range []struct {
		rec  Observed
		srcs []Source
		want bool
	}{{plain, cms, true}, {plain, withSecret, false}, {o, withSecret, true}, {o, cms, false}} {
		if got := c.rec.Certain(c.srcs); got != c.want {
			t.Errorf("%q certain for %v: %v, want %v", c.rec.String(), c.srcs, got, c.want)
		}
	}
}

// A record names the key its hash was computed under; a record of an older version,
// without it, still parses (unknown key), and a malformed key makes the record invalid.
func TestObservedKey(t *testing.T) {
	hash, fp := strings.Repeat("ab", 32), "0123456789abcdef"
	for _, o := range []Observed{
		{Hash: hash, Template: fp, Key: "0f4dd1f41f10"},
		{Hash: hash, Template: fp, Secrets: true, Key: "0f4dd1f41f10"},
	} {
		got, ok := ParseObserved(o.String())
		if !ok || got != o || !strings.HasSuffix(o.String(), " key=0f4dd1f41f10") {
			t.Errorf("round trip %q: %+v %v", o.String(), got, ok)
		}
	}
	for v, want := range map[string]Observed{
		hash + " template=" + fp:              {Hash: hash, Template: fp},
		hash + " template=" + fp + " secrets": {Hash: hash, Template: fp, Secrets: true},
	} {
		if got, ok := ParseObserved(v); !ok || got != want || got.Key != "" {
			t.Errorf("an older record %q: %+v %v, want %+v (unknown key)", v, got, ok, want)
		}
	}
	for _, bad := range []string{
		hash + " template=" + fp + " key=",
		hash + " template=" + fp + " key=0F4DD1F41F10",
		hash + " template=" + fp + " key=0f4dd1f41f1",
		hash + " template=" + fp + " key=0f4dd1f41f10 secrets",
		hash + " template=" + fp + " key=0f4dd1f41f10 key=0f4dd1f41f10",
		hash + " template=" + fp + " secrets secrets",
		hash + " template=" + fp + " key=0f4dd1f41f10 ",
	} {
		if o, ok := ParseObserved(bad); ok {
			t.Errorf("ParseObserved(%q) accepted: %+v", bad, o)
		}
	}
}

// A record of a workload whose older pods stay (OnDelete, a partition) names the config
// they run after everything else; without a key too; a malformed one is invalid.
func TestObservedBehind(t *testing.T) {
	hash, old, fp := strings.Repeat("ab", 32), strings.Repeat("cd", 32), "0123456789abcdef"
	for _, o := range []Observed{
		{Hash: hash, Template: fp, Key: "0f4dd1f41f10", Behind: old},
		{Hash: hash, Template: fp, Behind: old},
		{Hash: hash, Template: fp, Secrets: true, Behind: old},
	} {
		got, ok := ParseObserved(o.String())
		if !ok || got != o || !strings.HasSuffix(o.String(), " behind="+old) {
			t.Errorf("round trip %q: %+v %v", o.String(), got, ok)
		}
	}
	for _, bad := range []string{
		hash + " template=" + fp + " behind=",
		hash + " template=" + fp + " behind=" + old[:12],
		hash + " template=" + fp + " behind=" + old + " key=0f4dd1f41f10",
		hash + " template=" + fp + " behind=" + old + " behind=" + old,
	} {
		if o, ok := ParseObserved(bad); ok {
			t.Errorf("ParseObserved(%q) accepted: %+v", bad, o)
		}
	}
}
