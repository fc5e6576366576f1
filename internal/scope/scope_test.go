package scope

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestScope(t *testing.T) {
	s, err := New("configstamp.io/inject", []string{" kube-system", "configstamp-system", "", "kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"configstamp-system", "kube-system"}; !reflect.DeepEqual(s.Excluded, want) {
		t.Fatalf("Excluded = %v, want %v", s.Excluded, want)
	}
	on := map[string]string{"configstamp.io/inject": "enabled"}
	for _, tt := range []struct {
		ns     string
		labels map[string]string
		want   bool
	}{
		{"team", on, true},
		{"team", nil, false},
		{"team", map[string]string{"configstamp.io/inject": "disabled"}, false},
		{"kube-system", on, false},
		{"configstamp-system", on, false},
	} {
		if got := s.Includes(tt.ns, tt.labels); got != tt.want {
			t.Errorf("Includes(%s, %v) = %v, want %v", tt.ns, tt.labels, got, tt.want)
		}
	}
	sel := s.NamespaceSelector()
	if len(sel.MatchExpressions) != 1 || sel.MatchExpressions[0].Operator != metav1.LabelSelectorOpNotIn ||
		!reflect.DeepEqual(sel.MatchExpressions[0].Values, s.Excluded) {
		t.Fatalf("selector %+v", sel)
	}
}

func TestWatched(t *testing.T) {
	s, err := NewWatched("configstamp.io/inject", []string{"kube-system", "configstamp-system"}, []string{"b", " a", "", "kube-system", "a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b"}; !reflect.DeepEqual(s.Watched, want) {
		t.Fatalf("Watched = %v, want %v (sorted, unique, the excluded one dropped)", s.Watched, want)
	}
	on := map[string]string{"configstamp.io/inject": "enabled"}
	for _, tt := range []struct {
		ns           string
		nsLabels     map[string]string
		objLabels    map[string]string
		in, workload bool
	}{
		{"a", nil, nil, true, true},
		{"b", on, nil, true, true},
		{"c", on, nil, false, false}, // not listed: its opt-in label does not count
		{"c", nil, on, false, false}, // nor a workload's
		{"kube-system", on, on, false, false},
	} {
		if got := s.Includes(tt.ns, tt.nsLabels); got != tt.in {
			t.Errorf("Includes(%s, %v) = %v, want %v", tt.ns, tt.nsLabels, got, tt.in)
		}
		if got := s.IncludesWorkload(tt.ns, tt.nsLabels, tt.objLabels); got != tt.workload {
			t.Errorf("IncludesWorkload(%s, %v, %v) = %v, want %v", tt.ns, tt.nsLabels, tt.objLabels, got, tt.workload)
		}
	}
	if s.Labelled(on) || s.ByLabel() {
		t.Error("a workload's label opts it in by itself in a namespaced install")
	}
	want := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}
	if got := s.NamespaceSelector(); !reflect.DeepEqual(got, want) {
		t.Errorf("NamespaceSelector = %+v, want %+v", got, want)
	}
	if _, err := NewWatched("configstamp.io/inject", []string{"kube-system"}, []string{"kube-system"}); err == nil {
		t.Error("a list of excluded namespaces only was accepted")
	}
	if s, _ := NewWatched("configstamp.io/inject", nil, []string{""}); s.Namespaced() {
		t.Error("an empty list made a namespaced scope")
	}
}
