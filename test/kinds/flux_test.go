package kinds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	helmv2 "github.com/fluxcd/helm-controller/api/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/flux"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/hashdoc"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/events"
	"github.com/configstamp/configstamp/watcher"
)

// fluxOptions run configstamp with HelmReleases watched, Secrets counted, a source cap
// of 2 (the "crowded" HelmRelease takes 3), and the hash key read every 2s (a rotation
// is followed soon).
var fluxOptions = framework.Options{Args: []string{"--flux-helmreleases", "--secrets", "--max-sources=2", "--hash-key-refresh=2s"}}

// secretValues is what a HelmRelease takes from a Secret: no trace of it may show.
const secretValues = "password: hunter2"

// replayMargin is a little more than how far back the watcher replays source writes at
// start (watcher's replayMargin, 10s).
const replayMargin = 12 * time.Second

// TestFluxHelmReleases proves, with the real HelmRelease CRD and no helm-controller, that
// configstamp requests a reconcile (a new reconcile.fluxcd.io/requestedAt, counted on a
// watch of the HelmReleases) exactly once per change of what a HelmRelease takes from
// its valuesFrom ConfigMaps: none for a label-only edit or another key; one for two
// referenced ConfigMaps edited together; one for a Secret's (keyed: no trace of its
// values in the record); none while suspended, nor when a required ConfigMap is deleted
// (an Event instead), nor ever for one annotated configstamp.io/skip or taking more
// sources than --max-sources (a TooManySources Event); one
// at start for an edit made while configstamp was down, none at a restart with nothing
// changed, and one for the first values edit after a hash key rotation; for a HelmRelease
// created before configstamp first started and one created
// after; in a namespace not opted in, for a HelmRelease opted in by its label alone.
func TestFluxHelmReleases(t *testing.T) {
	if err := env.InstallCRDs(bg, framework.FluxHelmReleaseCRD()); err != nil {
		t.Fatal(err)
	}
	c := fluxClient(t)
	ns := env.NewNamespace(t, true)
	createConfigMap(t, ns, "a", map[string]string{flux.DefaultValuesKey: "replicas: 1", "other": "x"}, nil)
	createConfigMap(t, ns, "b", map[string]string{flux.DefaultValuesKey: "image: v1"}, nil)
	before := newHelmRelease(ns, "before", false, "a", "b")
	suspended := newHelmRelease(ns, "suspended", true, "a")
	createConfigMap(t, ns, "d", map[string]string{flux.DefaultValuesKey: "replicas: 1"}, nil)
	held := newHelmRelease(ns, "held", false, "d")
	// The workloads' entry checks: opted out, or over --max-sources: never recorded nor
	// requested, and no source of crowded read.
	skipped := newHelmRelease(ns, "skipped", false, "a")
	skipped.Annotations = map[string]string{stamp.SkipAnnotation: "true"}
	createConfigMap(t, ns, "e", map[string]string{flux.DefaultValuesKey: "replicas: 1"}, nil)
	crowded := newHelmRelease(ns, "crowded", false, "a", "b", "e")
	secretive := newHelmRelease(ns, "secretive", false)
	secretive.Spec.ValuesFrom = []helmv2.ValuesReference{{Kind: "Secret", Name: "s"}}
	if err := env.Client.Create(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"},
		StringData: map[string]string{flux.DefaultValuesKey: secretValues}}); err != nil {
		t.Fatal(err)
	}
	for _, hr := range []*helmv2.HelmRelease{before, suspended, secretive, held, skipped, crowded} {
		if err := c.Create(bg, hr); err != nil {
			t.Fatal(err)
		}
	}
	requests := watchRequests(t, c, ns)
	// Scope as for workloads: in a namespace that is not opted in, only a HelmRelease
	// opted in by its own label.
	optNs := env.NewNamespace(t, false)
	createConfigMap(t, optNs, "c", map[string]string{flux.DefaultValuesKey: "replicas: 1"}, nil)
	labelled, plain := newHelmRelease(optNs, "labelled", false, "c"), newHelmRelease(optNs, "plain", false, "c")
	labelled.Labels = optedIn
	for _, hr := range []*helmv2.HelmRelease{labelled, plain} {
		if err := c.Create(bg, hr); err != nil {
			t.Fatal(err)
		}
	}
	optRequests := watchRequests(t, c, optNs)

	cs := env.Start(t, fluxOptions)
	// First sight: recorded, nothing requested (installing configstamp requests nothing).
	waitValuesRecord(t, c, before)
	waitValuesRecord(t, c, suspended)
	waitValuesRecord(t, c, secretive)
	waitValuesRecord(t, c, held)
	after := newHelmRelease(ns, "after", false, "b")
	if err := c.Create(bg, after); err != nil {
		t.Fatal(err)
	}
	waitValuesRecord(t, c, after)
	waitValuesRecord(t, c, labelled)
	framework.Eventually(t, time.Minute, "crowded reported", func() error {
		return events.Find(env.Client, ns, "crowded", watcher.ReasonTooManySources, "3 sources")
	})
	requests.expect(t, 0, map[string]int{"before": 0, "suspended": 0, "after": 0, "secretive": 0})

	t.Run("self policy", func(t *testing.T) { testHelmReleasePolicy(t, c, ns) })

	t.Run("label-only edit and another key: none", func(t *testing.T) {
		seen := checks(cs, ns, "before")
		relabel(t, ns, "a")
		configmaps.SetData(t, env.Client, ns, "a", "other", "y")
		framework.Eventually(t, time.Minute, "before checked again", func() error {
			if n := checks(cs, ns, "before"); n <= seen {
				return fmt.Errorf("%d checks, as before the edits", n)
			}
			return nil
		})
		requests.expect(t, 0, map[string]int{"before": 0, "suspended": 0, "after": 0, "secretive": 0})
	})

	t.Run("two ConfigMaps edited together: one request", func(t *testing.T) {
		configmaps.SetData(t, env.Client, ns, "a", flux.DefaultValuesKey, "replicas: 2")
		configmaps.SetData(t, env.Client, ns, "b", flux.DefaultValuesKey, "image: v2")
		configmaps.SetData(t, env.Client, optNs, "c", flux.DefaultValuesKey, "replicas: 2")
		configmaps.Delete(t, env.Client, ns, "d") // required: helm-controller would fail
		patch := client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"`+flux.DefaultValuesKey+`":"`+secretValues+`0"}}`))
		if err := env.Client.Patch(bg, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "s"}}, patch); err != nil {
			t.Fatal(err)
		}
		requests.wait(t, map[string]int{"before": 1, "after": 1, "secretive": 1})
		noSecretTrace(t, c, secretive)
		// The record is the config hash of the keys taken, as docs/hash.md specifies it.
		takes := []hashdoc.Source{{Name: "a", Keys: []string{flux.DefaultValuesKey}, EnvOnly: true}, {Name: "b", Keys: []string{flux.DefaultValuesKey}, EnvOnly: true}}
		want := hashdoc.KeyFingerprint(framework.HashKey) + ":" + hashdoc.Hash(takes, configmaps.Lookup(t, env.Client, ns), framework.HashKey, ns)
		fresh := &helmv2.HelmRelease{}
		if err := c.Get(bg, client.ObjectKeyFromObject(before), fresh); err != nil {
			t.Fatal(err)
		}
		if got := fresh.Annotations[stamp.ValuesAnnotation]; got != want {
			t.Errorf("before: record %s, docs/hash.md gives %s", got, want)
		}
		optRequests.wait(t, map[string]int{"labelled": 1})
		optRequests.expect(t, 0, map[string]int{"plain": 0})
		fresh = &helmv2.HelmRelease{}
		if err := c.Get(bg, client.ObjectKeyFromObject(plain), fresh); err != nil {
			t.Fatal(err)
		}
		if r, ok := fresh.Annotations[stamp.ValuesAnnotation]; ok {
			t.Errorf("plain, out of scope: recorded %s", r)
		}
		framework.Eventually(t, time.Minute, "events", func() error {
			if err := events.Find(env.Client, ns, "before", watcher.ReasonReconcileRequested, "configmap/a="); err != nil {
				return err
			}
			if err := events.Find(env.Client, ns, "held", watcher.ReasonConfigMissing, "configmap/d is missing"); err != nil {
				return err
			}
			return events.Find(env.Client, ns, "suspended", watcher.ReasonHelmReleaseSuspended, "")
		})
		requests.expect(t, settle, map[string]int{"before": 1, "suspended": 0, "after": 1, "secretive": 1, "held": 0, "skipped": 0, "crowded": 0})
		for _, hr := range []*helmv2.HelmRelease{skipped, crowded} {
			fresh := &helmv2.HelmRelease{}
			if err := c.Get(bg, client.ObjectKeyFromObject(hr), fresh); err != nil {
				t.Fatal(err)
			}
			if r, ok := fresh.Annotations[stamp.ValuesAnnotation]; ok {
				t.Errorf("%s, left alone: recorded %s", hr.Name, r)
			}
		}
		// The skip taken off: recorded at once (first sight), so that its next change
		// is requested; nothing requested now.
		unskip := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+stamp.SkipAnnotation+`":null}}}`))
		if err := c.Patch(bg, &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "skipped"}}, unskip); err != nil {
			t.Fatal(err)
		}
		waitValuesRecord(t, c, skipped)
		requests.expect(t, 0, map[string]int{"skipped": 0})
	})
	if t.Failed() {
		return
	}

	t.Run("edited while configstamp was down: one request at start", func(t *testing.T) {
		cs.Stop()
		configmaps.SetData(t, env.Client, ns, "b", flux.DefaultValuesKey, "image: v3")
		// Past the watcher's start-up replay of recent source writes (10s): the request
		// must come from the HelmReleases' own check at start, not from the ConfigMap.
		time.Sleep(replayMargin)
		cs = env.Start(t, fluxOptions)
		requests.wait(t, map[string]int{"before": 2, "after": 2})
		requests.expect(t, settle, map[string]int{"before": 2, "suspended": 0, "after": 2, "secretive": 1, "held": 0})
	})
	if t.Failed() {
		return
	}

	t.Run("restart with nothing changed: none", func(t *testing.T) {
		cs.Stop()
		cs = env.Start(t, fluxOptions)
		framework.Eventually(t, time.Minute, "checked at start", func() error {
			for _, name := range []string{"before", "after"} {
				if checks(cs, ns, name) == 0 {
					return fmt.Errorf("%s not checked yet", name)
				}
			}
			return nil
		})
		requests.expect(t, settle, map[string]int{"before": 2, "suspended": 0, "after": 2, "secretive": 1, "held": 0})
	})
	if t.Failed() {
		return
	}

	t.Run("values edited after a hash key rotation: one request", func(t *testing.T) {
		// Every record is then under the old key: the first check after the rotation
		// cannot compare, but it follows a change seen live, so it requests.
		cs.Stop()
		cs = env.Start(t, fluxOptions)
		framework.Eventually(t, time.Minute, "checked at start", func() error {
			if checks(cs, ns, "before") == 0 || checks(cs, ns, "after") == 0 {
				return fmt.Errorf("not checked yet")
			}
			return nil
		})
		rotateHashKey(t, []byte("configstamp-flux-test-rotated-k!"))
		framework.Eventually(t, time.Minute, "the new key followed", func() error {
			if !strings.Contains(cs.Output(), "The hash key changed") {
				return fmt.Errorf("configstamp has not followed the new key")
			}
			return nil
		})
		configmaps.SetData(t, env.Client, ns, "b", flux.DefaultValuesKey, "image: v4")
		requests.wait(t, map[string]int{"before": 3, "after": 3})
		requests.expect(t, settle, map[string]int{"before": 3, "suspended": 0, "after": 3, "secretive": 1, "held": 0})
	})
}

// rotateHashKey puts key into the framework's hash key Secret until the test ends (then
// the framework's key again: the other tests recompute stamps with it).
func rotateHashKey(t *testing.T, key []byte) {
	t.Helper()
	set := func(k []byte) error {
		var sec corev1.Secret
		if err := env.Client.Get(bg, client.ObjectKey{Namespace: framework.HashKeyNamespace, Name: framework.HashKeyName}, &sec); err != nil {
			return err
		}
		sec.Data = map[string][]byte{hashkey.DataKey: k}
		return env.Client.Update(bg, &sec)
	}
	if err := set(key); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := set(framework.HashKey); err != nil {
			t.Errorf("restore the hash key: %v", err)
		}
	})
}

// testHelmReleasePolicy: under the chart's self policy, configstamp's user may change
// only reconcile.fluxcd.io/requestedAt and configstamp.io/values-hash of a HelmRelease.
func testHelmReleasePolicy(t *testing.T, c client.Client, ns string) {
	hr := newHelmRelease(ns, "policy", false)
	if err := c.Create(bg, hr); err != nil {
		t.Fatal(err)
	}
	as, err := env.ConfigstampClient()
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(helmv2.GroupVersion.WithKind(flux.Kind))
	u.SetNamespace(ns)
	u.SetName(hr.Name)
	for patch, allowed := range map[string]bool{
		`{"spec":{"suspend":true}}`:                                     false,
		`{"spec":{"valuesFrom":[{"kind":"ConfigMap","name":"other"}]}}`: false,
		`{"metadata":{"labels":{"extra":"x"}}}`:                         false,
		`{"metadata":{"annotations":{"someone.else/key":"x"}}}`:         false,
		fmt.Sprintf(`{"metadata":{"annotations":{%q:"now",%q:"k:h"}}}`, flux.RequestedAtAnnotation, stamp.ValuesAnnotation): true,
	} {
		err := as.Patch(bg, u, client.RawPatch(types.MergePatchType, []byte(patch)))
		switch {
		case allowed && err != nil:
			t.Errorf("patch %s as configstamp refused: %v", patch, err)
		case !allowed && (err == nil || !strings.Contains(err.Error(), "denied request")):
			t.Errorf("patch %s as configstamp: %v, want the policy's denial", patch, err)
		}
	}
	if err := as.Delete(bg, u); err == nil || !strings.Contains(err.Error(), "denied request") {
		t.Errorf("delete as configstamp: %v, want the policy's denial", err)
	}
}

// noSecretTrace asserts that hr's record holds neither the values it takes from a Secret
// nor their unkeyed SHA-256 (the record is keyed: configstamp's hash key).
func noSecretTrace(t *testing.T, c client.Client, hr *helmv2.HelmRelease) {
	t.Helper()
	fresh := &helmv2.HelmRelease{}
	if err := c.Get(bg, client.ObjectKeyFromObject(hr), fresh); err != nil {
		t.Fatal(err)
	}
	rec := fresh.Annotations[stamp.ValuesAnnotation]
	for _, v := range []string{secretValues, secretValues + "0"} {
		sum := sha256.Sum256([]byte(v))
		if rec == "" || strings.Contains(rec, "hunter2") || strings.Contains(rec, hex.EncodeToString(sum[:])) {
			t.Errorf("record %q: empty, or a trace of the Secret's values", rec)
		}
	}
}

// fluxClient is an admin client that knows HelmReleases and can watch.
func fluxClient(t testing.TB) client.WithWatch {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := flux.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(env.Cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newHelmRelease takes values.yaml of each ConfigMap in cms.
func newHelmRelease(ns, name string, suspend bool, cms ...string) *helmv2.HelmRelease {
	hr := &helmv2.HelmRelease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: helmv2.HelmReleaseSpec{
		Interval: metav1.Duration{Duration: time.Hour}, Suspend: suspend,
		Chart: &helmv2.HelmChartTemplate{Spec: helmv2.HelmChartTemplateSpec{Chart: "app",
			SourceRef: helmv2.CrossNamespaceObjectReference{Kind: "HelmRepository", Name: "charts"}}},
	}}
	for _, cm := range cms {
		hr.Spec.ValuesFrom = append(hr.Spec.ValuesFrom, helmv2.ValuesReference{Kind: "ConfigMap", Name: cm})
	}
	return hr
}

// waitValuesRecord waits until configstamp has recorded what hr takes.
func waitValuesRecord(t testing.TB, c client.Client, hr *helmv2.HelmRelease) {
	t.Helper()
	framework.Eventually(t, time.Minute, hr.Name+" recorded", func() error {
		fresh := &helmv2.HelmRelease{}
		if err := c.Get(bg, client.ObjectKeyFromObject(hr), fresh); err != nil {
			return err
		}
		if fresh.Annotations[stamp.ValuesAnnotation] == "" {
			return fmt.Errorf("no %s", stamp.ValuesAnnotation)
		}
		return nil
	})
}

// checks counts configstamp's checks of the HelmRelease ns/name so far (its log).
func checks(cs *framework.Configstamp, ns, name string) int {
	n := 0
	for _, rec := range cs.Logs() {
		if rec["msg"] == "Checked HelmRelease values" && rec["namespace"] == ns && rec["name"] == name {
			n++
		}
	}
	return n
}

// requestLog counts, from a watch, the distinct values of reconcile.fluxcd.io/requestedAt
// each HelmRelease of a namespace has had (each is one request).
type requestLog struct {
	mu     sync.Mutex
	values map[string]map[string]bool
}

// watchRequests watches the HelmReleases of ns until the test ends, resuming where it
// stopped when the API server ends a watch.
func watchRequests(t testing.TB, c client.WithWatch, ns string) *requestLog {
	t.Helper()
	l := &requestLog{values: map[string]map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	list := &helmv2.HelmReleaseList{}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &helmv2.HelmReleaseList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for e := range w.ResultChan() {
				hr, ok := e.Object.(*helmv2.HelmRelease)
				if !ok || (e.Type != watch.Added && e.Type != watch.Modified) {
					continue
				}
				rv = hr.ResourceVersion
				if v := hr.Annotations[flux.RequestedAtAnnotation]; v != "" {
					l.mu.Lock()
					if l.values[hr.Name] == nil {
						l.values[hr.Name] = map[string]bool{}
					}
					l.values[hr.Name][v] = true
					l.mu.Unlock()
				}
			}
			w.Stop()
		}
	}()
	return l
}

// diff says how the counts differ from want ("" when they do not), and whether one is
// past it (a request too many never goes away).
func (l *requestLog) diff(want map[string]int) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for name, n := range want {
		if got := len(l.values[name]); got != n {
			return fmt.Sprintf("%s: %d requests, want %d", name, got, n), got > n
		}
	}
	return "", false
}

// wait waits until the counts are want; it fails at once when one is past it.
func (l *requestLog) wait(t testing.TB, want map[string]int) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, "requests", func() error {
		d, past := l.diff(want)
		if past {
			t.Fatal(d)
		}
		if d != "" {
			return fmt.Errorf("%s", d)
		}
		return nil
	})
}

// expect asserts the counts are want now and for the period after.
func (l *requestLog) expect(t testing.TB, period time.Duration, want map[string]int) {
	t.Helper()
	check := func() error {
		if d, _ := l.diff(want); d != "" {
			return fmt.Errorf("%s", d)
		}
		return nil
	}
	if err := check(); err != nil {
		t.Fatal(err)
	}
	if period > 0 {
		framework.Consistently(t, period, "requests", check)
	}
}
