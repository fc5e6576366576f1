package watcher

import (
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/stamp"
)

// ConfigMapIndex indexes Deployments by the ConfigMaps their pods consume, as
// "namespace/name", so a ConfigMap event finds its dependents without a LIST.
const ConfigMapIndex = "configstamp.io/configmaps"

// indexConfigMaps is the field index function for ConfigMapIndex.
func indexConfigMaps(obj client.Object) []string {
	dep, ok := obj.(*appsv1.Deployment)
	if !ok {
		return nil
	}
	srcs := stamp.References(&dep.Spec.Template.Spec)
	keys := make([]string, 0, len(srcs))
	for _, s := range srcs {
		keys = append(keys, indexKey(dep.Namespace, s.Name))
	}
	return keys
}

func indexKey(namespace, name string) string { return namespace + "/" + name }
