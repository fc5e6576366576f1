// Package scope says which namespaces configstamp acts in. The webhook registration's
// namespaceSelector and the watcher are built from it, so the watcher never acts where
// the API server does not send admissions (it could only ever see its nudges bypassed).
// A namespaced install (--watch-namespaces) acts in a fixed list of namespaces: there
// the list alone decides, and no label (of a namespace or a workload) counts.
package scope

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/configstamp/configstamp/stamp"
)

// DefaultExcluded are the namespaces configstamp never acts in, whatever their labels.
var DefaultExcluded = []string{"kube-system"}

// Scope is the opt-in label (value "enabled") and the namespaces excluded whatever
// their labels; in a namespaced install, the namespaces acted in instead of the label.
type Scope struct {
	Label    string
	Excluded []string
	// Watched are the namespaces of a namespaced install, less the excluded ones
	// (which win); nil: every namespace that opts in.
	Watched  []string
	selector labels.Selector
}

// New returns the scope of label and excluded (sorted, unique, empty names dropped).
func New(label string, excluded []string) (*Scope, error) {
	return NewWatched(label, excluded, nil)
}

// NewWatched is New for a namespaced install when watched names namespaces (empty names
// dropped): configstamp acts in those, less the excluded ones, and nowhere else.
func NewWatched(label string, excluded, watched []string) (*Scope, error) {
	s := &Scope{Label: label, Excluded: names(excluded)}
	if w := names(watched); len(w) > 0 {
		s.Watched = slices.DeleteFunc(w, func(n string) bool { return slices.Contains(s.Excluded, n) })
		if len(s.Watched) == 0 {
			return nil, fmt.Errorf("every watched namespace (%s) is excluded", strings.Join(w, ", "))
		}
	}
	sel, err := metav1.LabelSelectorAsSelector(s.NamespaceSelector())
	if err != nil {
		return nil, fmt.Errorf("namespace selector: %w", err)
	}
	s.selector = sel
	return s, nil
}

// names are list's names trimmed, sorted and unique, empty ones dropped.
func names(list []string) []string {
	var out []string
	for _, n := range list {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Namespaced reports whether this is a namespaced install (a list of namespaces).
func (s *Scope) Namespaced() bool { return len(s.Watched) > 0 }

// NamespaceSelector is the registration's namespaceSelector: the opt-in label, and not
// one of the excluded namespaces (by the kubernetes.io/metadata.name label the API
// server sets on every namespace). Namespaced: one of the watched namespaces.
func (s *Scope) NamespaceSelector() *metav1.LabelSelector {
	if s.Namespaced() {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: slices.Clone(s.Watched),
		}}}
	}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{s.Label: stamp.InjectValue}}
	if len(s.Excluded) > 0 {
		sel.MatchExpressions = []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: slices.Clone(s.Excluded),
		}}
	}
	return sel
}

// Includes reports whether the namespace named name, with these labels, is one the
// registration sends admissions for. Namespaced: whether it is watched (the labels are
// not looked at; nil will do).
func (s *Scope) Includes(name string, nsLabels map[string]string) bool {
	if s.IsExcluded(name) {
		return false
	}
	set := labels.Set{}
	for k, v := range nsLabels {
		set[k] = v
	}
	set[corev1.LabelMetadataName] = name
	return s.selector.Matches(set)
}

// Labelled reports whether a workload's labels opt it in by itself; never in a
// namespaced install, where the namespace list alone decides.
func (s *Scope) Labelled(objLabels map[string]string) bool {
	return !s.Namespaced() && objLabels[s.Label] == stamp.InjectValue
}

// IncludesWorkload reports whether the registration sends admissions for a workload
// with objLabels in the namespace named name (with nsLabels): its namespace opted in,
// or the workload itself in a namespace not excluded.
func (s *Scope) IncludesWorkload(name string, nsLabels, objLabels map[string]string) bool {
	if s.Includes(name, nsLabels) {
		return true
	}
	return s.Labelled(objLabels) && !s.IsExcluded(name)
}

// IsExcluded reports whether the namespace named name is one configstamp never acts in.
func (s *Scope) IsExcluded(name string) bool { return slices.Contains(s.Excluded, name) }

// ByLabel reports whether the registration has by-label entries (workloads opted in by
// their own label): not in a namespaced install.
func (s *Scope) ByLabel() bool { return !s.Namespaced() }

// ObjectSelector is the objectSelector of the registration's by-label entries: the
// opt-in label on the workload itself.
func (s *Scope) ObjectSelector() *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{s.Label: stamp.InjectValue}}
}

// LabelNamespaceSelector is the namespaceSelector of the by-label entries: namespaces
// not opted in (those that are go to the namespace entries, so a workload that matches
// both ways is sent once) and not excluded.
func (s *Scope) LabelNamespaceSelector() *metav1.LabelSelector {
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: s.Label, Operator: metav1.LabelSelectorOpNotIn, Values: []string{stamp.InjectValue},
	}}}
	if len(s.Excluded) > 0 {
		sel.MatchExpressions = append(sel.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpNotIn, Values: slices.Clone(s.Excluded),
		})
	}
	return sel
}
