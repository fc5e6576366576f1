package webhook

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// ScopeFunc reports whether configstamp acts on a workload with objLabels in namespace:
// the namespace opted in, or the workload by its own label, and the namespace not
// excluded. An error: it cannot tell now (answered unstamped, nothing read).
type ScopeFunc func(ctx context.Context, namespace string, objLabels map[string]string) (bool, error)

// outside checks a review's own boundaries before anything is read: the objects in the
// request's namespace, and the workload in configstamp's scope (by its labels or, on an
// UPDATE, its old labels, as the registration's objectSelector matches either). A
// review outside them, which the API server would not send, is answered allowed with no
// patch and no log line (a flood of forged reviews must not fill the log); result says
// which boundary ("": inside).
func (s *Stamper) outside(ctx context.Context, req admission.Request, obj, old client.Object) (result string, warnings []string) {
	if req.Namespace == "" {
		return resultNamespaceMismatch, nil
	}
	for _, o := range []client.Object{obj, old} {
		if o != nil && o.GetNamespace() != "" && o.GetNamespace() != req.Namespace {
			return resultNamespaceMismatch, nil
		}
	}
	in, err := s.inScope(ctx, req.Namespace, obj.GetLabels())
	if err == nil && !in && old != nil {
		in, err = s.inScope(ctx, req.Namespace, old.GetLabels())
	}
	return scopeResult(in, err)
}

// namespaceOutside is outside for a review whose objects do not decode: placed by its
// namespace alone (a workload opting in by its own label in a namespace that does not is
// outside), so that a malformed review outside the scope leaves no log line either.
func (s *Stamper) namespaceOutside(ctx context.Context, req admission.Request) (result string, warnings []string) {
	if req.Namespace == "" {
		return resultNamespaceMismatch, nil
	}
	return scopeResult(s.inScope(ctx, req.Namespace, nil))
}

func (s *Stamper) inScope(ctx context.Context, namespace string, objLabels map[string]string) (bool, error) {
	if s.InScope == nil {
		return true, nil
	}
	return s.InScope(ctx, namespace, objLabels)
}

func scopeResult(in bool, err error) (result string, warnings []string) {
	switch {
	case err != nil:
		return resultScopeUnknown, []string{scopeUnknownWarning}
	case !in:
		return resultOutOfScope, nil
	}
	return "", nil
}
