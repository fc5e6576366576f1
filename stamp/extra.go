package stamp

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Ref names one source object: Kind is a SourceKind's Name.
type Ref struct {
	Kind string
	Name string
}

// ExtraSources parses the value of ExtraSourcesAnnotation: a comma-separated list of
// "KIND/NAME", KIND a source kind's Name ("configmap/NAME" or "secret/NAME"; kinds in
// any case, spaces around entries allowed, empty entries skipped). It returns the
// entries that count and, for each one that does not (malformed, or of a kind whose
// Flag is off), why.
func ExtraSources(value string, opts Options) (refs []Ref, problems []string) {
	for _, entry := range strings.Split(value, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		kind, name, ok := strings.Cut(entry, "/")
		k := SourceKindNamed(strings.ToLower(strings.TrimSpace(kind)))
		name = strings.TrimSpace(name)
		switch {
		case !ok || k == nil:
			problems = append(problems, fmt.Sprintf("%q: want %s", entry, SourceNames("/NAME")))
		case len(validation.IsDNS1123Subdomain(name)) > 0:
			problems = append(problems, fmt.Sprintf("%q: %q is not a valid object name", entry, name))
		case !k.Counts(opts):
			problems = append(problems, fmt.Sprintf("%q: %s are not enabled in configstamp (%s)", entry, k.Plural, k.Flag))
		default:
			refs = append(refs, Ref{Kind: k.Name, Name: name})
		}
	}
	return refs, problems
}
