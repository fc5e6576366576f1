package webhook

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/internal/scope"
	"github.com/configstamp/configstamp/internal/workload"
)

// A namespaced install registers one entry per kind, for the watched namespaces only;
// a cluster-wide one two (the namespace opt-in and the workload's own label).
func TestRegistrationEntries(t *testing.T) {
	cfg := admissionregistrationv1.WebhookClientConfig{URL: new("https://127.0.0.1:9443")}
	wide, _ := scope.New("configstamp.io/inject", scope.DefaultExcluded)
	if n := len(Registration(cfg, wide, workload.Builtin()).Webhooks); n != 2*len(workload.Builtin()) {
		t.Errorf("cluster-wide: %d entries", n)
	}
	sc, err := scope.NewWatched("configstamp.io/inject", scope.DefaultExcluded, []string{"b", "a"})
	if err != nil {
		t.Fatal(err)
	}
	reg := Registration(cfg, sc, workload.Builtin())
	var names []string
	for _, w := range reg.Webhooks {
		names = append(names, w.Name)
		e := w.NamespaceSelector.MatchExpressions
		if w.ObjectSelector != nil || len(w.NamespaceSelector.MatchLabels) > 0 || len(e) != 1 ||
			e[0].Operator != metav1.LabelSelectorOpIn || !slices.Equal(e[0].Values, []string{"a", "b"}) {
			t.Errorf("entry %s: %+v %+v", w.Name, w.NamespaceSelector, w.ObjectSelector)
		}
	}
	if want := []string{"deployments.configstamp.io", "statefulsets.configstamp.io", "daemonsets.configstamp.io", "cronjobs.configstamp.io", "jobs.configstamp.io"}; !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v", names, want)
	}
	// A Job's template cannot change: its entries send CREATE alone.
	for _, w := range Registration(cfg, wide, workload.Builtin()).Webhooks {
		ops := w.Rules[0].Operations
		if createOnly := strings.HasPrefix(w.Name, "jobs."); len(ops) != map[bool]int{true: 1, false: 2}[createOnly] || ops[0] != admissionregistrationv1.Create {
			t.Errorf("entry %s: operations %v", w.Name, ops)
		}
	}
}
