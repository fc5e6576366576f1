package argo

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"
)

// canary is a Rollout as users write it (Argo's examples/rollout-canary.yaml), with a
// status as the Argo controller writes it.
const canary = `
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: rollout-canary
  namespace: shop
  labels:
    app: rollout-canary
spec:
  replicas: 5
  revisionHistoryLimit: 2
  selector:
    matchLabels:
      app: rollout-canary
  template:
    metadata:
      labels:
        app: rollout-canary
      annotations:
        configstamp.io/config-hash: abc
    spec:
      containers:
      - name: rollouts-demo
        image: argoproj/rollouts-demo:blue
        imagePullPolicy: Always
        ports:
        - containerPort: 8080
        envFrom:
        - configMapRef:
            name: demo-config
      volumes:
      - name: tls
        secret:
          secretName: demo-tls
  strategy:
    canary:
      steps:
      - setWeight: 20
      - pause: {}
      - setWeight: 40
      - pause: {duration: 40s}
status:
  observedGeneration: "7"
  phase: Paused
  HPAReplicas: 5
  stableRS: 6c8f7d9b5
`

func decodeCanary(t *testing.T) *Rollout {
	t.Helper()
	var r Rollout
	if err := yaml.Unmarshal([]byte(canary), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func TestDecodeCanary(t *testing.T) {
	r := decodeCanary(t)
	if r.APIVersion != GroupVersion.String() || r.Kind != "Rollout" || r.Namespace != "shop" || r.Name != "rollout-canary" {
		t.Fatalf("type or object meta: %+v %+v", r.TypeMeta, r.ObjectMeta)
	}
	if r.Spec.Replicas == nil || *r.Spec.Replicas != 5 {
		t.Errorf("replicas %v", r.Spec.Replicas)
	}
	if r.Spec.Selector == nil || r.Spec.Selector.MatchLabels["app"] != "rollout-canary" {
		t.Errorf("selector %v", r.Spec.Selector)
	}
	if r.Spec.WorkloadRef != nil {
		t.Errorf("workloadRef %v, want none", r.Spec.WorkloadRef)
	}
	tpl := r.Spec.Template
	if tpl.Labels["app"] != "rollout-canary" || tpl.Annotations["configstamp.io/config-hash"] != "abc" {
		t.Errorf("template metadata %+v", tpl.ObjectMeta)
	}
	if len(tpl.Spec.Containers) != 1 {
		t.Fatalf("containers %+v", tpl.Spec.Containers)
	}
	c := tpl.Spec.Containers[0]
	if c.Image != "argoproj/rollouts-demo:blue" || c.ImagePullPolicy != corev1.PullAlways || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("container %+v", c)
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef == nil || c.EnvFrom[0].ConfigMapRef.Name != "demo-config" {
		t.Errorf("envFrom %+v", c.EnvFrom)
	}
	if len(tpl.Spec.Volumes) != 1 || tpl.Spec.Volumes[0].Secret == nil || tpl.Spec.Volumes[0].Secret.SecretName != "demo-tls" {
		t.Errorf("volumes %+v", tpl.Spec.Volumes)
	}
	if r.Status.ObservedGeneration != "7" {
		t.Errorf("observedGeneration %q, want \"7\"", r.Status.ObservedGeneration)
	}
}

func TestDecodeWorkloadRef(t *testing.T) {
	var r Rollout
	err := yaml.Unmarshal([]byte(`
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata: {name: ref}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  workloadRef: {apiVersion: apps/v1, kind: Deployment, name: web, scaleDown: progressively}
  strategy: {canary: {steps: [{setWeight: 50}]}}
`), &r)
	if err != nil {
		t.Fatal(err)
	}
	want := WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	if r.Spec.WorkloadRef == nil || *r.Spec.WorkloadRef != want {
		t.Fatalf("workloadRef %+v, want %+v", r.Spec.WorkloadRef, want)
	}
	if !equality.Semantic.DeepEqual(r.Spec.Template, corev1.PodTemplateSpec{}) {
		t.Fatalf("template %+v, want empty", r.Spec.Template)
	}
}

func TestDeepCopyShares(t *testing.T) {
	orig := decodeCanary(t)
	orig.Spec.WorkloadRef = &WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}
	pristine := decodeCanary(t)
	pristine.Spec.WorkloadRef = &WorkloadRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}

	cp := orig.DeepCopy()
	if !equality.Semantic.DeepEqual(cp, orig) {
		t.Fatal("copy differs from the original")
	}
	cp.Labels["app"] = "changed"
	*cp.Spec.Replicas = 9
	cp.Spec.Selector.MatchLabels["app"] = "changed"
	cp.Spec.Template.Annotations["configstamp.io/config-hash"] = "changed"
	cp.Spec.Template.Spec.Containers[0].Image = "changed"
	cp.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name = "changed"
	cp.Spec.Template.Spec.Volumes[0].Secret.SecretName = "changed"
	cp.Spec.WorkloadRef.Name = "changed"
	cp.Status.ObservedGeneration = "8"
	if !equality.Semantic.DeepEqual(orig, pristine) {
		t.Fatalf("changing the copy changed the original: %+v", orig)
	}

	obj := orig.DeepCopyObject()
	if r, ok := obj.(*Rollout); !ok || r == orig || !equality.Semantic.DeepEqual(r, orig) {
		t.Fatalf("DeepCopyObject = %#v", obj)
	}
	if (*Rollout)(nil).DeepCopy() != nil || (*Rollout)(nil).DeepCopyObject() != nil {
		t.Fatal("copy of nil is not nil")
	}

	list := &RolloutList{Items: []Rollout{*orig}}
	lcp := list.DeepCopyObject().(*RolloutList)
	lcp.Items[0].Spec.Template.Spec.Containers[0].Image = "changed"
	lcp.Items[0].Name = "changed"
	if !equality.Semantic.DeepEqual(list.Items[0], *pristine) {
		t.Fatal("changing the list copy changed the original")
	}
	if (*RolloutList)(nil).DeepCopyObject() != nil {
		t.Fatal("copy of a nil list is not nil")
	}
}

func TestScheme(t *testing.T) {
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		obj  runtime.Object
	}{
		{"Rollout", &Rollout{}},
		{"RolloutList", &RolloutList{}},
	} {
		gvk := GroupVersion.WithKind(tc.kind)
		obj, err := s.New(gvk)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.TypeOf(obj) != reflect.TypeOf(tc.obj) {
			t.Fatalf("scheme.New(%v) = %T, want %T", gvk, obj, tc.obj)
		}
		kinds, _, err := s.ObjectKinds(tc.obj)
		if err != nil || len(kinds) != 1 || kinds[0] != gvk {
			t.Fatalf("ObjectKinds(%T) = %v, %v; want %v", tc.obj, kinds, err, gvk)
		}
	}

	// Decoded through the scheme, as a client does, a Rollout comes back typed and whole.
	obj, gvk, err := serializer.NewCodecFactory(s).UniversalDeserializer().Decode([]byte(canary), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := obj.(*Rollout)
	if !ok || gvk.Kind != "Rollout" {
		t.Fatalf("decoded %T as %v", obj, gvk)
	}
	if !equality.Semantic.DeepEqual(r.Spec, decodeCanary(t).Spec) {
		t.Fatalf("decoded spec %+v", r.Spec)
	}
}

// A Rollout whose template the API server accepted but that does not decode as a pod
// template (Argo's CRD does not check volumes) decodes with TemplateError set, and does
// not fail the decode of a list it is in (an informer's list).
func TestDecodeBadTemplate(t *testing.T) {
	const list = `{"apiVersion":"argoproj.io/v1alpha1","kind":"RolloutList","metadata":{},"items":[
	 {"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":"bad","namespace":"ns"},
	  "spec":{"selector":{"matchLabels":{"app":"bad"}},"template":{"metadata":{"labels":{"app":"bad"}},
	   "spec":{"containers":[{"name":"c","image":"i"}],"volumes":[{"name":"v","secret":{"secretName":"s","defaultMode":"0644"}}]}}}},
	 {"apiVersion":"argoproj.io/v1alpha1","kind":"Rollout","metadata":{"name":"good","namespace":"ns"},
	  "spec":{"selector":{"matchLabels":{"app":"good"}},"template":{"metadata":{"labels":{"app":"good"}},
	   "spec":{"containers":[{"name":"c","image":"i"}]}}}}]}`
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	obj, _, err := serializer.NewCodecFactory(scheme).UniversalDeserializer().Decode([]byte(list), nil, nil)
	if err != nil {
		t.Fatalf("the list did not decode: %v", err)
	}
	items := obj.(*RolloutList).Items
	if len(items) != 2 || items[0].Spec.TemplateError == "" || items[0].Spec.Template.Labels != nil || items[0].Spec.Selector == nil {
		t.Fatalf("bad item: %+v", items[0].Spec)
	}
	if items[1].Spec.TemplateError != "" || items[1].Spec.Template.Spec.Containers[0].Image != "i" {
		t.Fatalf("good item: %+v", items[1].Spec)
	}
}
