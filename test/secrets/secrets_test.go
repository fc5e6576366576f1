package secrets

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// password is the Secret value whose guesses the stamp must not let anyone test.
const password = "hunter2"

// TestSecrets runs configstamp five times against one cluster: without --secrets, then
// with --secrets under key A, under a new key B (another installation's key), under key
// B again, and after key B's Secret was deleted and re-created while it ran (the
// documented rotation). The objects of each phase stay, so each later phase also judges
// the earlier ones.
func TestSecrets(t *testing.T) {
	ns := env.NewNamespace(t, true)
	// configstamp's own namespace, where it keeps the hash key: not opted in.
	keyNS := env.NewNamespace(t, false)
	var runs []*framework.Configstamp
	// rs is how many ReplicaSets each Deployment has once the current phase is done.
	rs := map[string]int{}
	var keyA []byte
	var dbHashA string

	t.Run("secrets disabled", func(t *testing.T) {
		mark := auditMark()
		// The key the next run uses: turning Secrets on with the same key rolls nothing
		// that consumes no Secret (the chart keeps one key Secret either way).
		cs := env.Start(t, framework.Options{Args: []string{"--hash-key", keyNS + "/key-a"}})
		runs = append(runs, cs)

		// "mixed" consumes a ConfigMap and a Secret through volumes; "cmonly" a
		// ConfigMap only.
		createConfigMap(t, ns, "mixed", map[string]string{"k": "1"})
		createSecret(t, opaque(ns, "mixed", map[string]string{"p": "1"}))
		createConfigMap(t, ns, "cmonly", map[string]string{"k": "1"})
		createDeployment(t, ns, "mixed", container(corev1.Container{}, configMapVolume("mixed"), secretVolume("mixed")))
		createDeployment(t, ns, "cmonly", container(corev1.Container{}, configMapVolume("cmonly")))
		d := rollouts(t, ns, "mixed", 1)
		if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; !strings.HasPrefix(got, "configmap/mixed=") || strings.Contains(got, "secret/") {
			t.Fatalf("mixed: sources %q, want the ConfigMap only", got)
		}
		if _, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template); !ok {
			t.Fatalf("mixed: no record: %q", d.Annotations[stamp.ObservedAnnotation])
		}
		rs["mixed"], rs["cmonly"] = 1, 1

		setSecretData(t, ns, "mixed", "p", "2")
		rollouts(t, ns, "mixed", 1)
		setConfigMapData(t, ns, "mixed", "k", "2")
		rollouts(t, ns, "mixed", 2)
		rs["mixed"] = 2
		rollouts(t, ns, "cmonly", 1)

		cs.Stop()
		evs := auditSince(t, mark)
		var configMaps int
		for _, ev := range evs {
			// Its own hash key Secret it reads with Secrets off too: every digest is keyed.
			ownKey := ev.ObjectRef.Namespace == keyNS && ev.ObjectRef.Name == "key-a"
			if ev.ObjectRef.Resource == "secrets" && !ownKey {
				t.Errorf("with Secrets off, configstamp's user did %s on secrets %s/%s (stage %s)",
					ev.Verb, ev.ObjectRef.Namespace, ev.ObjectRef.Name, ev.Stage)
			}
			if ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == "mixed" && ev.Verb == "get" {
				configMaps++
			}
		}
		// The audit log does show this run's requests: the live reads of the ConfigMap.
		if configMaps == 0 {
			t.Errorf("no get of configmap %s/mixed by %s among %d audit events of this run", ns, "configstamp", len(evs))
		}
	})
	if t.Failed() {
		return
	}

	t.Run("secrets enabled, key A", func(t *testing.T) {
		mark := auditMark()
		cs := env.Start(t, framework.Options{Args: []string{"--secrets", "--hash-key", keyNS + "/key-a"}})
		runs = append(runs, cs)
		keyA = readKey(t, keyNS, "key-a")

		t.Run("scenarios", func(t *testing.T) {
			t.Run("turning Secrets on records, then a Secret change rolls once", func(t *testing.T) {
				t.Parallel()
				turnedOn(t, ns, keyA)
			})
			t.Run("a cert-manager TLS renewal rolls each consumer once", func(t *testing.T) {
				t.Parallel()
				tlsRenewal(t, ns, keyA)
			})
			t.Run("a key secretKeyRef does not read rolls nothing", func(t *testing.T) {
				t.Parallel()
				createSecret(t, opaque(ns, "keyref", map[string]string{"a": "1", "b": "1"}))
				createDeployment(t, ns, "keyref", container(corev1.Container{Env: []corev1.EnvVar{secretKeyRef("keyref", "a")}}))
				rollouts(t, ns, "keyref", 1)
				before := checks(cs, ns, "keyref")
				setSecretData(t, ns, "keyref", "b", "2")
				checkedAfter(t, cs, ns, "keyref", before)
				rollouts(t, ns, "keyref", 1)
				setSecretData(t, ns, "keyref", "a", "2")
				rollouts(t, ns, "keyref", 2)
				stampedWith(t, ns, "keyref", keyA)
			})
			t.Run("envFrom.secretRef: any data change rolls once", func(t *testing.T) {
				t.Parallel()
				createSecret(t, opaque(ns, "envfrom", map[string]string{"x": "1"}))
				createDeployment(t, ns, "envfrom", container(corev1.Container{EnvFrom: []corev1.EnvFromSource{secretEnvFrom("envfrom")}}))
				rollouts(t, ns, "envfrom", 1)
				setSecretData(t, ns, "envfrom", "y", "1")
				rollouts(t, ns, "envfrom", 2)
				stampedWith(t, ns, "envfrom", keyA)
			})
			t.Run("the stamp holds only keyed digests", func(t *testing.T) {
				t.Parallel()
				dbHashA = keyedDigest(t, cs, ns, keyA)
			})
		})
		rs["tls-volume"], rs["tls-projected"], rs["keyref"], rs["envfrom"], rs["db"], rs["ctl"] = 2, 2, 2, 2, 1, 1
		rs["mixed"] = 3
		if t.Failed() {
			return
		}

		cs.Stop()
		var gets, watches int
		for _, ev := range auditSince(t, mark) {
			if ev.ObjectRef.Resource != "secrets" {
				continue
			}
			if ev.Verb == "get" && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Name == "db" {
				gets++
			}
			if ev.Verb == "watch" {
				watches++
			}
		}
		// The assertion of the disabled run can fail: this run's reads of Secrets are
		// in the audit log.
		if gets == 0 || watches == 0 {
			t.Fatalf("with Secrets on, the audit log shows %d gets of secret %s/db and %d watches of secrets by configstamp's user, want some of each", gets, ns, watches)
		}
	})
	if t.Failed() {
		return
	}

	// Another key (as another installation's): every stamp changes once, ConfigMap-only
	// ones too (every digest is keyed).
	var keyB []byte
	t.Run("a new key rolls every consumer once", func(t *testing.T) {
		cs := env.Start(t, framework.Options{Args: []string{"--secrets", "--hash-key", keyNS + "/key-b"}})
		runs = append(runs, cs)
		keyB = readKey(t, keyNS, "key-b")
		if string(keyB) == string(keyA) {
			t.Fatal("key B equals key A")
		}
		if got := readKey(t, keyNS, "key-a"); string(got) != string(keyA) {
			t.Fatal("key A changed")
		}
		for name := range rs {
			rs[name]++
		}
		expectAll(t, "every consumer rolled once", rs, func(t *testing.T, name string, d *appsv1.Deployment) {
			stampedWith(t, ns, name, keyB)
		}, ns)
		if h := env.Deployment(t, ns, "db").Spec.Template.Annotations[stamp.HashAnnotation]; h == dbHashA {
			t.Fatalf("db: the same stamp %s under two keys", h)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("a restart keeps the key; deleting the key rotates it", func(t *testing.T) {
		d := env.Deployment(t, ns, "db")
		hashB := d.Spec.Template.Annotations[stamp.HashAnnotation]
		cs := env.Start(t, framework.Options{Args: []string{"--secrets", "--hash-key", keyNS + "/key-b"}})
		runs = append(runs, cs)
		if got := readKey(t, keyNS, "key-b"); string(got) != string(keyB) {
			t.Fatal("key B changed on restart")
		}
		// Every Deployment is checked on start and found current, then nothing rolls.
		for name := range rs {
			checkedAfter(t, cs, ns, name, 0)
		}
		expectAll(t, "nothing rolled", rs, nil, ns)
		if h := env.Deployment(t, ns, "db").Spec.Template.Annotations[stamp.HashAnnotation]; h != hashB {
			t.Fatalf("db: stamp %s after a restart, was %s", h, hashB)
		}

		// The documented rotation: delete the key Secret; configstamp creates a new key
		// while it runs and follows it; after a restart every consumer rolls once.
		if err := env.Client.Delete(bg, getSecret(t, keyNS, "key-b")); err != nil {
			t.Fatal(err)
		}
		var keyC []byte
		framework.Eventually(t, 30*time.Second, "a new key in "+keyNS+"/key-b, followed", func() error {
			var sec corev1.Secret
			if err := env.Client.Get(bg, client.ObjectKey{Namespace: keyNS, Name: "key-b"}, &sec); err != nil {
				return err
			}
			if keyC = sec.Data[hashkey.DataKey]; len(keyC) != 32 || string(keyC) == string(keyB) {
				return fmt.Errorf("key of %d bytes, the old one: %v", len(keyC), string(keyC) == string(keyB))
			}
			if !strings.Contains(cs.Output(), "The hash key changed") {
				return fmt.Errorf("configstamp has not followed the new key")
			}
			return nil
		})
		for name, n := range rs {
			if got := len(env.ReplicaSets(t, env.Deployment(t, ns, name))); got != n {
				t.Fatalf("%s: %d ReplicaSets before the restart, want %d", name, got, n)
			}
		}
		cs.Stop()
		runs = append(runs, env.Start(t, framework.Options{Args: []string{"--secrets", "--hash-key", keyNS + "/key-b"}}))
		for name := range rs {
			rs[name]++
		}
		expectAll(t, "every consumer rolled once", rs, func(t *testing.T, name string, d *appsv1.Deployment) {
			stampedWith(t, ns, name, keyC)
		}, ns)
	})

	// configstamp's memory cannot be seen from outside; what it writes can. A Secret
	// applied with client-side kubectl apply (its value in clear in
	// last-applied-configuration) was watched, read and stamped above.
	t.Run("logs never carry the Secret's value", func(t *testing.T) {
		var out strings.Builder
		for _, cs := range runs {
			out.WriteString(cs.Output())
		}
		all := out.String()
		for _, s := range []string{password, base64.StdEncoding.EncodeToString([]byte(password))} {
			if strings.Contains(all, s) {
				t.Errorf("configstamp's log contains %q", s)
			}
		}
		if found := contains(all, unkeyed(t, ns)); len(found) > 0 {
			t.Errorf("configstamp's log contains unkeyed digests: %v", found)
		}
		// The log does speak of that Secret (only through keyed digests).
		if !strings.Contains(all, "secret/db=") {
			t.Errorf("configstamp's log never mentions secret/db: the check above proves nothing")
		}
	})
}

// turnedOn: "mixed" consumes a ConfigMap and a Secret; its stamp and record were made
// with Secrets off, and its Secret was written before its pods started. Turning Secrets
// on is judged like an install: a new record that takes the Secret in (marked
// " secrets"), no rollout; the next change of the Secret rolls it once. "cmonly",
// consuming no Secret, is untouched.
func turnedOn(t *testing.T, ns string, key []byte) {
	framework.Eventually(t, time.Minute, "a record of mixed that covers its Secret", func() error {
		d := env.Deployment(t, ns, "mixed")
		rec, ok := stamp.ObservedFor(d.Annotations, &d.Spec.Template)
		if !ok || !rec.Secrets {
			return fmt.Errorf("record %q", d.Annotations[stamp.ObservedAnnotation])
		}
		if want := expected(t, d, key).Hash; rec.Hash != want {
			return fmt.Errorf("record %q, want hash %s", d.Annotations[stamp.ObservedAnnotation], want)
		}
		return nil
	})
	d := rollouts(t, ns, "mixed", 2)
	if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; strings.Contains(got, "secret/") {
		t.Fatalf("mixed re-stamped without a rollout? sources %q", got)
	}
	rollouts(t, ns, "cmonly", 1)
	setSecretData(t, ns, "mixed", "p", "3")
	rollouts(t, ns, "mixed", 3)
	stampedWith(t, ns, "mixed", key)
}

// expectAll asserts, in a subtest named what, for every Deployment at once, its
// ReplicaSet count (and then calls check, if any).
func expectAll(t *testing.T, what string, rs map[string]int, check func(t *testing.T, name string, d *appsv1.Deployment), ns string) {
	t.Run(what, func(t *testing.T) {
		for name, n := range rs {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				d := rollouts(t, ns, name, n)
				if check != nil {
					check(t, name, d)
				}
			})
		}
	})
}

// tlsRenewal: a kubernetes.io/tls Secret consumed by a secret volume and by a projected
// volume is renewed the way cert-manager renews it: one update replacing tls.crt,
// tls.key and ca.crt and cert-manager's annotations. Each consumer rolls exactly once;
// a later metadata-only write (cert-manager's reconcile of labels) rolls nothing.
func tlsRenewal(t *testing.T, ns string, key []byte) {
	const dnsName = "web.example.com"
	ca, crt, tlsKey := issue(t, dnsName)
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls", Annotations: certManagerAnnotations("web", dnsName, 1),
			Labels: map[string]string{"controller.cert-manager.io/fao": "true"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: tlsKey, "ca.crt": ca},
	}
	createSecret(t, sec)
	createDeployment(t, ns, "tls-volume", container(corev1.Container{}, secretVolume("web-tls")))
	createDeployment(t, ns, "tls-projected", container(corev1.Container{},
		projectedSecret("web-tls", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, "ca.crt")))
	consumers := []string{"tls-volume", "tls-projected"}
	for _, name := range consumers {
		rollouts(t, ns, name, 1)
		if src := env.Deployment(t, ns, name).Spec.Template.Annotations[stamp.SourcesAnnotation]; !strings.HasPrefix(src, "secret/web-tls=") {
			t.Fatalf("%s: sources %q", name, src)
		}
	}

	// The renewal: one update.
	sec = getSecret(t, ns, "web-tls")
	ca, crt, tlsKey = issue(t, dnsName)
	sec.Data = map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: tlsKey, "ca.crt": ca}
	for k, v := range certManagerAnnotations("web", dnsName, 2) {
		sec.Annotations[k] = v
	}
	if err := env.Client.Update(bg, sec); err != nil {
		t.Fatal(err)
	}
	for _, name := range consumers {
		framework.Eventually(t, time.Minute, name+" rolled", func() error {
			if n := len(env.ReplicaSets(t, env.Deployment(t, ns, name))); n != 2 {
				return fmt.Errorf("%d ReplicaSets", n)
			}
			return nil
		})
	}
	patch(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-tls"}},
		`{"metadata":{"labels":{"controller.cert-manager.io/fao":"true","app.kubernetes.io/managed-by":"cert-manager"}}}`)
	for _, name := range consumers {
		rollouts(t, ns, name, 2)
		stampedWith(t, ns, name, key)
	}
}

// keyedDigest: a Deployment consuming a Secret whose value is password, applied with
// client-side kubectl apply, carries only keyed digests of it (the documented HMAC under
// key), nowhere an unkeyed SHA-256 of the value, of the Secret's encoding (as a Secret or
// as a ConfigMap) or of its data as JSON. The stamps of db and of a ConfigMap with the
// same content are the documented HMACs of encodeSource's encodings: the unkeyed
// digests computed here (SHA-256 of the same encodings) are what an unkeyed stamp would
// show. It returns db's config hash.
func keyedDigest(t *testing.T, cs *framework.Configstamp, ns string, key []byte) string {
	apply := func(team string) {
		t.Helper()
		cmd := env.Command("", nil, "kubectl", "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: %s
  annotations:
    team: %s
type: Opaque
stringData:
  password: %s
`, ns, team, password))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	apply("payments")
	if la := getSecret(t, ns, "db").Annotations[corev1.LastAppliedConfigAnnotation]; !strings.Contains(la, password) {
		t.Fatalf("client-side apply left no clear copy in last-applied-configuration: %q", la)
	}
	createDeployment(t, ns, "db", container(corev1.Container{Env: []corev1.EnvVar{secretKeyRef("db", "password")}}))
	createConfigMap(t, ns, "ctl", map[string]string{"password": password})
	createDeployment(t, ns, "ctl", container(corev1.Container{Env: []corev1.EnvVar{configMapKeyRef("ctl", "password")}}))
	rollouts(t, ns, "db", 1)
	// A metadata-only re-apply: watched (its last-applied copy in clear), rolls nothing.
	before := checks(cs, ns, "db")
	apply("billing")
	checkedAfter(t, cs, ns, "db", before)
	d := rollouts(t, ns, "db", 1)
	rollouts(t, ns, "ctl", 1)

	// The stamps are the documented ones: keyed for the Secret and the ConfigMap.
	data := map[string]string{"password": password}
	secretDigest := keyed(namespaceKey(key, ns), encodeSource("secret", "db", []string{"password"}, data))
	ctlDigest := keyed(namespaceKey(key, ns), encodeSource("configmap", "ctl", []string{"password"}, data))
	for _, c := range []struct {
		name, hash, sources string
	}{
		{"db", configHash(secretDigest), "secret/db=" + fmt.Sprintf("%x", secretDigest)[:12]},
		{"ctl", configHash(ctlDigest), "configmap/ctl=" + fmt.Sprintf("%x", ctlDigest)[:12]},
	} {
		ann := env.Deployment(t, ns, c.name).Spec.Template.Annotations
		if ann[stamp.HashAnnotation] != c.hash || ann[stamp.SourcesAnnotation] != c.sources {
			t.Fatalf("%s: stamp %q %q, want the documented %q %q", c.name, ann[stamp.HashAnnotation], ann[stamp.SourcesAnnotation], c.hash, c.sources)
		}
	}

	// Nowhere an unkeyed digest: the Deployment (stamp, record), its ReplicaSets and
	// Events, and the API server's audit log (its audit annotations).
	var hay strings.Builder
	add := func(v any) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		hay.Write(b)
	}
	add(d)
	add(env.ReplicaSets(t, d))
	var evs corev1.EventList
	if err := env.Client.List(bg, &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	add(evs)
	audit, err := os.ReadFile(env.Cluster.AuditLog)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"`+webhook.EntryName+"/"+webhook.AuditSources+`":"secret/db=`) {
		t.Fatal("no audit annotation with secret/db in the audit log: the check below proves nothing")
	}
	hay.Write(audit)
	if found := contains(hay.String(), unkeyed(t, ns)); len(found) > 0 {
		t.Fatalf("unkeyed digests of the Secret found: %v", found)
	}
	return d.Spec.Template.Annotations[stamp.HashAnnotation]
}

// unkeyed are the unkeyed digests of Secret db (hex) that must appear nowhere: of the
// value, of the Secret's documented encoding as a Secret and as a ConfigMap-style source
// (as db consumes it and with all keys), the config hashes those would make, and of its
// data as JSON.
func unkeyed(t testing.TB, ns string) map[string]string {
	sec := getSecret(t, ns, "db")
	content := stamp.SecretContent(sec)
	out := map[string]string{
		"SHA-256 of the value":        hexSum([]byte(password)),
		"SHA-256 of the value base64": hexSum([]byte(base64.StdEncoding.EncodeToString([]byte(password)))),
	}
	for _, keys := range [][]string{{"password"}, nil} {
		label := fmt.Sprintf("keys %v", keys)
		asSecret := sum(encodeSource("secret", "db", keys, content.Data))
		out["SHA-256 of the Secret encoding, "+label] = fmt.Sprintf("%x", asSecret)
		out["config hash of the unkeyed Secret encoding, "+label] = configHash(asSecret)
		asConfigMap := sum(encodeSource("configmap", "db", keys, content.Data))
		out["SHA-256 of the ConfigMap-style encoding, "+label] = fmt.Sprintf("%x", asConfigMap)
		out["config hash of the ConfigMap-style encoding, "+label] = configHash(asConfigMap)
	}
	dataJSON, _ := json.Marshal(sec.Data)
	stringJSON, _ := json.Marshal(content.Data)
	out["SHA-256 of the data JSON"] = hexSum(dataJSON)
	out["SHA-256 of the data JSON, decoded"] = hexSum(stringJSON)
	return out
}
