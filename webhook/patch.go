package webhook

import (
	"maps"
	"slices"

	"github.com/go-openapi/jsonpointer"
	"gomodules.xyz/jsonpatch/v2"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/stamp"
)

// written is the order of the metadata annotations configstamp writes, after the
// template's.
var written = []string{stamp.ObservedAnnotation, stamp.KeysAnnotation, stamp.ChangeCauseAnnotation}

// patch is the JSON patch that makes the incoming object what p says: the stripped
// metadata annotations, then the template's, then the record and the change cause.
func (in *input) patch(p *plan) []jsonpatch.JsonPatchOperation {
	meta := &annotationsAt{base: "/metadata", m: maps.Clone(in.annotations)}
	strip := map[string]string{}
	for _, k := range p.strip {
		strip[k] = ""
	}
	ops := meta.set(strip)
	if len(p.template) > 0 {
		tmpl := &annotationsAt{base: in.kind.TemplatePath() + "/metadata", m: maps.Clone(in.tmpl.Annotations),
			whole: equality.Semantic.DeepEqual(in.tmpl.ObjectMeta, metav1.ObjectMeta{})}
		ops = append(ops, tmpl.set(p.template)...)
	}
	for _, k := range written {
		if v, ok := p.metadata[k]; ok {
			ops = append(ops, meta.set(map[string]string{k: v})...)
		}
	}
	return ops
}

// annotationsAt is the annotations of the metadata at base (a JSON pointer) as the ops
// so far leave them.
type annotationsAt struct {
	base string
	// whole: the metadata holds nothing worth keeping (and may be absent), so an add
	// writes it whole.
	whole bool
	m     map[string]string
}

// set returns the smallest ops that make each key of want hold its value (""; absent),
// removals first, each in key order, and applies them to a.
func (a *annotationsAt) set(want map[string]string) []jsonpatch.JsonPatchOperation {
	var ops []jsonpatch.JsonPatchOperation
	adds := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, has := a.m[k]
		switch v := want[k]; {
		case v == "" && has:
			ops = append(ops, jsonpatch.NewOperation("remove", a.base+"/annotations/"+jsonpointer.Escape(k), nil))
			delete(a.m, k)
		case v != "" && (!has || got != v):
			adds[k] = v
		}
	}
	switch {
	case len(adds) == 0:
		return ops
	case a.whole:
		a.whole, a.m = false, maps.Clone(adds)
		return append(ops, jsonpatch.NewOperation("add", a.base, map[string]any{"annotations": adds}))
	case a.m == nil:
		a.m = maps.Clone(adds)
		return append(ops, jsonpatch.NewOperation("add", a.base+"/annotations", adds))
	}
	for _, k := range slices.Sorted(maps.Keys(adds)) {
		ops = append(ops, jsonpatch.NewOperation("add", a.base+"/annotations/"+jsonpointer.Escape(k), adds[k]))
		a.m[k] = adds[k]
	}
	return ops
}
