package stamp

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Ref names one source object: Kind is KindConfigMap or KindSecret.
type Ref struct {
	Kind string
	Name string
}

// ExtraSources parses the value of ExtraSourcesAnnotation: a comma-separated list of
// "configmap/NAME" or "secret/NAME" (kinds in any case, spaces around entries allowed,
// empty entries skipped). It returns the entries that count and, for each one that does
// not (malformed, or a Secret while Secrets are off), why.
func ExtraSources(value string, opts Options) (refs []Ref, problems []string) {
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kind, name, ok := strings.Cut(entry, "/")
		kind = strings.ToLower(strings.TrimSpace(kind))
		name = strings.TrimSpace(name)
		switch {
		case !ok || (kind != KindConfigMap && kind != KindSecret):
			problems = append(problems, fmt.Sprintf("%q: want configmap/NAME or secret/NAME", entry))
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			problems = append(problems, fmt.Sprintf("%q: %q is not a valid object name", entry, name))
		case kind == KindSecret && !opts.Secrets:
			problems = append(problems, fmt.Sprintf("%q: Secrets are not enabled in configstamp (--secrets)", entry))
		default:
			refs = append(refs, Ref{Kind: kind, Name: name})
		}
	}
	return refs, problems
}
