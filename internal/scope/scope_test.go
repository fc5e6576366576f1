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
