package flux

import (
	"reflect"
	"testing"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
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
		return stamp.Source{Kind: stamp.KindConfigMap, Name: name, Keys: keys, Required: required, RequiredKeys: keys, RequiredEnvKeys: keys}
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

func TestDecide(t *testing.T) {
	hr := func(record string, suspend bool) *helmv2.HelmRelease {
		h := &helmv2.HelmRelease{Spec: helmv2.HelmReleaseSpec{Suspend: suspend}}
		if record != "" {
			h.ObjectMeta = metav1.ObjectMeta{Annotations: map[string]string{stamp.ValuesAnnotation: record}}
		}
		return h
	}
	for _, c := range []struct {
		name  string
		hr    *helmv2.HelmRelease
		want  string
		unmet bool
		act   Action
	}{
		{"first sight: record only", hr("", false), "fp:h1", false, Record},
		{"unchanged", hr("fp:h1", false), "fp:h1", false, Nothing},
		{"unchanged, missing now (as recorded)", hr("fp:h1", false), "fp:h1", true, Nothing},
		{"changed", hr("fp:h1", false), "fp:h2", false, Request},
		{"changed, suspended", hr("fp:h1", true), "fp:h2", false, Suspended},
		{"changed to missing", hr("fp:h1", false), "fp:h2", true, Held},
		{"another key: record only", hr("old:h1", false), "fp:h2", false, Record},
		{"malformed record: record only", hr("h1", false), "fp:h2", false, Record},
		{"takes nothing", hr("fp:h1", false), "", false, Nothing},
		{"nil", nil, "fp:h1", false, Nothing},
	} {
		if got := Decide(c.hr, c.want, c.unmet); got != c.act {
			t.Errorf("%s: %s, want %s", c.name, got, c.act)
		}
	}
	if RecordOf("fp", "") != "" || RecordOf("fp", "h") != "fp:h" {
		t.Error("RecordOf")
	}
}
