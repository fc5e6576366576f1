package flux

import (
	"reflect"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

func TestSources(t *testing.T) {
	hr := &helmv2.HelmRelease{Spec: helmv2.HelmReleaseSpec{ValuesFrom: []helmv2.ValuesReference{
		{Kind: "ConfigMap", Name: "b"},
		{Kind: "ConfigMap", Name: "a", ValuesKey: "prod.yaml", TargetPath: "x.y", Optional: true},
		{Kind: "ConfigMap", Name: "a", ValuesKey: "base.yaml", Optional: true},
		{Kind: "Secret", Name: "creds", ValuesKey: "v"},
		{Kind: "Bucket", Name: "nope"},
		{Kind: "ConfigMap", Name: ""},
	}}}
	cm := func(name string, required bool, keys ...string) stamp.Source {
		s := stamp.Source{Kind: stamp.KindConfigMap, Name: name, Keys: keys, Required: required}
		if required {
			s.RequiredKeys, s.RequiredEnvKeys = keys, keys
		}
		return s
	}
	want := []stamp.Source{cm("a", false, "base.yaml", "prod.yaml"), cm("b", true, DefaultValuesKey)}
	if got := Sources(hr, stamp.Options{}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Secrets off: got %+v, want %+v", got, want)
	}
	sec := stamp.Source{Kind: stamp.KindSecret, Name: "creds", Keys: []string{"v"}, Required: true, RequiredKeys: []string{"v"}, RequiredEnvKeys: []string{"v"}}
	if got := Sources(hr, stamp.Options{Secrets: true}); !reflect.DeepEqual(got, append(want, sec)) {
		t.Fatalf("Secrets on: got %+v", got)
	}
	if Sources(nil, stamp.Options{}) != nil {
		t.Fatal("nil HelmRelease has sources")
	}
}

// TestSourcesOptionalKeys: helm-controller skips an optional reference whose key is
// missing (fluxcd/pkg chartutil.ChartValuesFromReferences) and fails a required one's, so
// only the keys of required references are required: the watcher holds no request when
// an optional entry's key goes away.
func TestSourcesOptionalKeys(t *testing.T) {
	hr := &helmv2.HelmRelease{Spec: helmv2.HelmReleaseSpec{ValuesFrom: []helmv2.ValuesReference{
		{Kind: "ConfigMap", Name: "m", ValuesKey: "base.yaml"},
		{Kind: "ConfigMap", Name: "m", ValuesKey: "override.yaml", Optional: true},
		{Kind: "ConfigMap", Name: "o", ValuesKey: "extra.yaml", Optional: true},
	}}}
	got := Sources(hr, stamp.Options{})
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	m, o := got[0], got[1]
	if !m.Required || !reflect.DeepEqual(m.Keys, []string{"base.yaml", "override.yaml"}) || !reflect.DeepEqual(m.RequiredKeys, []string{"base.yaml"}) {
		t.Errorf("m: %+v, want both keys taken, only base.yaml required", m)
	}
	if o.Required || len(o.RequiredKeys) != 0 {
		t.Errorf("o: %+v, want nothing required", o)
	}
	present := &corev1.ConfigMap{Data: map[string]string{"base.yaml": "a: 1"}}
	for _, s := range got {
		if u := s.Unmet(present); u != "" {
			t.Errorf("%s: unmet %q with only optional keys missing", s.Name, u)
		}
	}
	if u := m.Unmet(&corev1.ConfigMap{Data: map[string]string{"override.yaml": "a: 1"}}); u == "" {
		t.Error("m: the required key missing is not unmet")
	}
}

func TestDecide(t *testing.T) {
	hr := func(record string, suspend bool) *helmv2.HelmRelease {
		h := &helmv2.HelmRelease{Spec: helmv2.HelmReleaseSpec{Suspend: suspend}}
		if record != "" {
			h.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{stamp.ValuesAnnotation: record}}
		}
		return h
	}
	const fp, old = "0123456789ab", "ba9876543210" // key fingerprints
	for _, c := range []struct {
		name  string
		hr    *helmv2.HelmRelease
		want  string
		unmet bool
		live  bool
		act   Action
	}{
		{"first sight: record only", hr("", false), fp + ":h1", false, false, Record},
		{"unchanged", hr(fp+":h1", false), fp + ":h1", false, false, Nothing},
		{"unchanged, missing now (as recorded)", hr(fp+":h1", false), fp + ":h1", true, false, Nothing},
		{"changed", hr(fp+":h1", false), fp + ":h2", false, false, Request},
		{"changed, suspended", hr(fp+":h1", true), fp + ":h2", false, false, Suspended},
		{"changed to missing", hr(fp+":h1", false), fp + ":h2", true, false, Held},
		{"another key: record only", hr(old+":h1", false), fp + ":h2", false, false, Record},
		{"malformed record: record only", hr("h1", false), fp + ":h2", false, false, Record},
		{"takes nothing", hr(fp+":h1", false), "", false, false, Nothing},
		{"nil", nil, fp + ":h1", false, false, Nothing},
		// Under another key, a source changed live: requested, not lost.
		{"another key, changed live", hr(old+":h1", false), fp + ":h2", false, true, Request},
		{"another key, changed live, suspended", hr(old+":h1", true), fp + ":h2", false, true, Suspended},
		{"another key, changed live, missing", hr(old+":h1", false), fp + ":h2", true, true, Held},
		{"unchanged, changed live (another key of it)", hr(fp+":h1", false), fp + ":h1", false, true, Nothing},
		// First sight stays first sight (a HelmRelease applied with its ConfigMap is
		// reconciled by its creation), and garbage written there is no key.
		{"first sight, changed live", hr("", false), fp + ":h2", false, true, Record},
		{"malformed record, changed live", hr("h1", false), fp + ":h2", false, true, Record},
		{"garbage before the colon, changed live", hr("not-a-key:h1", false), fp + ":h2", false, true, Record},
	} {
		if got := Decide(c.hr, c.want, c.unmet, c.live); got != c.act {
			t.Errorf("%s: %s, want %s", c.name, got, c.act)
		}
	}
	if RecordOf("fp", "") != "" || RecordOf("fp", "h") != "fp:h" {
		t.Error("RecordOf")
	}
}
