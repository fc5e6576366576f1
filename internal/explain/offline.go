package explain

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/internal/workload"

	"github.com/configstamp/configstamp/stamp"
)

// OfflineStamp is the stamp of one workload computed from manifests.
type OfflineStamp struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Hash and Sources are the values of configstamp.io/config-hash and
	// configstamp.io/sources the webhook would write ("" hash: nothing to stamp).
	Hash    string `json:"hash"`
	Sources string `json:"sources"`
	// NotInFiles lists the consumed sources the files do not hold: hashed as missing,
	// as the webhook would if they did not exist.
	NotInFiles []string `json:"notInFiles,omitempty"`
	// Skipped: annotated configstamp.io/skip=true: the webhook leaves it unstamped
	// (Hash and Sources are "").
	Skipped bool `json:"skipped,omitempty"`
	// TooManySources: it consumes more sources than the cap (--max-sources): the webhook
	// reads none and keeps the stamp as stored (Hash and Sources are "").
	TooManySources bool `json:"tooManySources,omitempty"`
	// NamespaceDefaulted: the manifest gives no namespace and none was given (-n, the
	// kubeconfig context): Secret digests, keyed by namespace, may differ from the
	// cluster's.
	NamespaceDefaulted bool `json:"namespaceDefaulted,omitempty"`
}

// Manifests are the objects read from files.
type Manifests struct {
	Workloads []Candidate
	// Sources by namespace and "kind/name", as their kind's Content gives them.
	Sources map[string]map[string]*corev1.ConfigMap
	// NamespaceDefaulted: the namespace given to Decode is only a default (not -n nor
	// the kubeconfig's).
	NamespaceDefaulted bool
	defaulted          map[client.Object]bool
}

// Decode reads a stream of YAML documents or JSON objects (and v1 Lists) and keeps the
// workloads of kinds and the objects of the source kinds; objects without a namespace get
// namespace. Other objects are skipped.
func Decode(r io.Reader, namespace string, kinds []*workload.Kind, m *Manifests) error {
	if m.Sources == nil {
		m.Sources = map[string]map[string]*corev1.ConfigMap{}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := m.add(&u, namespace, kinds); err != nil {
			return err
		}
	}
}

func (m *Manifests) add(u *unstructured.Unstructured, namespace string, kinds []*workload.Kind) error {
	if u.IsList() {
		return u.EachListItem(func(o runtime.Object) error {
			return m.add(o.(*unstructured.Unstructured), namespace, kinds)
		})
	}
	defaulted := false
	if u.GetNamespace() == "" {
		u.SetNamespace(namespace)
		defaulted = m.NamespaceDefaulted
	}
	gvk := u.GroupVersionKind()
	into := func(obj any) error {
		b, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, obj); err != nil {
			return fmt.Errorf("decode %s %s/%s: %w", gvk.Kind, u.GetNamespace(), u.GetName(), err)
		}
		return nil
	}
	if sk := stamp.FindSourceKind(gvk.Group, gvk.Kind); sk != nil {
		obj := sk.New()
		if err := into(obj); err != nil {
			return err
		}
		ns := m.Sources[u.GetNamespace()]
		if ns == nil {
			ns = map[string]*corev1.ConfigMap{}
			m.Sources[u.GetNamespace()] = ns
		}
		ns[sk.Name+"/"+u.GetName()] = sk.Content(obj)
		return nil
	}
	k := workload.Find(kinds, gvk.Group, gvk.Kind)
	if k == nil {
		return nil
	}
	obj := k.New()
	if err := into(obj); err != nil {
		return err
	}
	m.Workloads = append(m.Workloads, Candidate{Kind: k, Object: obj})
	if defaulted {
		if m.defaulted == nil {
			m.defaulted = map[client.Object]bool{}
		}
		m.defaulted[obj] = true
	}
	return nil
}

// Offline computes each workload's stamp from the manifests with the stamp core: what
// the webhook would write for the same objects under the installation's hash key
// (hashkey's Secret; every digest is keyed) and opts (Secrets counting or not, the
// source cap).
func Offline(m *Manifests, key []byte, opts stamp.Options) ([]OfflineStamp, error) {
	if len(key) == 0 {
		return nil, stamp.ErrNoKey
	}
	out := []OfflineStamp{}
	for _, w := range m.Workloads {
		obj := w.Object
		tmpl := w.Kind.Template(obj)
		if tmpl == nil {
			continue
		}
		if stamp.IsTrue(obj.GetAnnotations()[stamp.SkipAnnotation]) {
			out = append(out, OfflineStamp{Kind: strings.ToLower(w.Kind.Kind), Namespace: obj.GetNamespace(), Name: obj.GetName(), Skipped: true})
			continue
		}
		refs := stamp.Consumed(obj.GetAnnotations(), &tmpl.Spec, opts)
		if opts.OverCap(refs) {
			out = append(out, OfflineStamp{Kind: strings.ToLower(w.Kind.Kind), Namespace: obj.GetNamespace(), Name: obj.GetName(), TooManySources: true})
			continue
		}
		srcs := m.Sources[obj.GetNamespace()]
		var absent []string
		lookup := func(_ context.Context, kind, name string) (*corev1.ConfigMap, error) {
			cm, ok := srcs[kind+"/"+name]
			if !ok {
				absent = append(absent, kind+"/"+name)
			}
			return cm, nil
		}
		st, err := stamp.Compute(context.Background(), refs, lookup, stamp.NamespaceKey(key, obj.GetNamespace()))
		if err != nil {
			return nil, err
		}
		out = append(out, OfflineStamp{
			Kind: strings.ToLower(w.Kind.Kind), Namespace: obj.GetNamespace(), Name: obj.GetName(),
			Hash: st.Hash, Sources: st.SourcesAnnotation(), NotInFiles: absent, NamespaceDefaulted: m.defaulted[obj],
		})
	}
	return out, nil
}

// ReadKey reads a hash key file: the key's raw bytes, or their base64 (as
// `kubectl get secret -o jsonpath='{.data.key}'` prints them; surrounding whitespace
// is ignored). A raw key followed by one newline (hashkey.Size+1 bytes) is taken
// without it. The caller checks the length.
func ReadKey(b []byte) []byte {
	if dec, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(b))); err == nil && len(dec) == hashkey.Size {
		return dec
	}
	if len(b) == hashkey.Size+1 && b[hashkey.Size] == '\n' {
		return b[:hashkey.Size]
	}
	return b
}
