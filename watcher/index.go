package watcher

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/workload"
	"github.com/configstamp/configstamp/stamp"
)

// SourceIndex indexes workloads by the sources their pods consume, as
// "kind/namespace/name", so a ConfigMap or Secret event finds its dependents without a
// LIST.
const SourceIndex = "configstamp.io/sources"

// indexSources returns the field index function of SourceIndex for one kind.
func indexSources(kind *workload.Kind, opts stamp.Options) client.IndexerFunc {
	return func(obj client.Object) []string {
		tmpl := kind.Template(obj)
		if tmpl == nil {
			return nil
		}
		srcs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, opts)
		keys := make([]string, 0, len(srcs))
		for _, s := range srcs {
			keys = append(keys, indexKey(s.Kind, obj.GetNamespace(), s.Name))
		}
		return keys
	}
}

func indexKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }
