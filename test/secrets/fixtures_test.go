package secrets

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/internal/configread"
	"github.com/configstamp/configstamp/internal/hashkey"
	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/bench"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/test/internal/configmaps"
	"github.com/configstamp/configstamp/test/internal/deployments"
)

var bg = context.Background()

// settle is how long a ReplicaSet count must hold: past the debounce (2s), the check,
// and a rollout that should not happen.
const settle = 6 * time.Second

// pod spec builders: one container, and what it consumes.

func container(c corev1.Container, volumes ...corev1.Volume) corev1.PodSpec {
	c.Name, c.Image = "app", "registry.example/app:1"
	for _, v := range volumes {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: "/etc/" + v.Name})
	}
	return corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: volumes}
}

func secretVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "s-" + name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: name}}}
}

func configMapVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "c-" + name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}}}}
}

func projectedSecret(name string, items ...string) corev1.Volume {
	p := &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}
	for _, k := range items {
		p.Items = append(p.Items, corev1.KeyToPath{Key: k, Path: k})
	}
	return corev1.Volume{Name: "p-" + name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{{Secret: p}}}}}
}

func secretKeyRef(secret, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: "V", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: key}}}
}

func configMapKeyRef(cm, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: "V", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key}}}
}

func secretEnvFrom(secret string) corev1.EnvFromSource {
	return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: secret}}}
}

// createDeployment creates a Deployment of two replicas with the pod spec.
func createDeployment(t testing.TB, ns, name string, spec corev1.PodSpec) {
	t.Helper()
	if err := env.Client.Create(bg, deployments.New(ns, name, 2, spec)); err != nil {
		t.Fatalf("create deployment %s/%s: %v", ns, name, err)
	}
}

func createConfigMap(t testing.TB, ns, name string, data map[string]string) {
	t.Helper()
	configmaps.Create(t, env.Client, ns, name, data, nil)
}

func createSecret(t testing.TB, sec *corev1.Secret) {
	t.Helper()
	if err := env.Client.Create(bg, sec); err != nil {
		t.Fatalf("create secret %s/%s: %v", sec.Namespace, sec.Name, err)
	}
}

func opaque(ns, name string, data map[string]string) *corev1.Secret {
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for k, v := range data {
		sec.Data[k] = []byte(v)
	}
	return sec
}

// patch merge-patches a ConfigMap or Secret (for a Secret, data values are base64).
func patch(t testing.TB, obj client.Object, p string) {
	t.Helper()
	if err := env.Client.Patch(bg, obj, client.RawPatch(types.MergePatchType, []byte(p))); err != nil {
		t.Fatalf("patch %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
	}
}

func setSecretData(t testing.TB, ns, name, key, value string) {
	t.Helper()
	patch(t, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		fmt.Sprintf(`{"stringData":{%q:%q}}`, key, value))
}

func setConfigMapData(t testing.TB, ns, name, key, value string) {
	t.Helper()
	patch(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}},
		fmt.Sprintf(`{"data":{%q:%q}}`, key, value))
}

func getSecret(t testing.TB, ns, name string) *corev1.Secret {
	t.Helper()
	var sec corev1.Secret
	if err := env.Client.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, &sec); err != nil {
		t.Fatalf("get secret %s/%s: %v", ns, name, err)
	}
	return &sec
}

// rollouts asserts that the Deployment reaches exactly n ReplicaSets and stays there,
// every pod Running with its hash.
func rollouts(t testing.TB, ns, name string, n int) *appsv1.Deployment {
	t.Helper()
	return env.ExpectReplicaSets(t, ns, name, n, settle)
}

// readKey reads the HMAC key configstamp keeps in keyNS/name, asserting it is 32 bytes.
func readKey(t testing.TB, keyNS, name string) []byte {
	t.Helper()
	key := getSecret(t, keyNS, name).Data[hashkey.DataKey]
	if len(key) != 32 {
		t.Fatalf("hash key secret %s/%s: %q holds %d bytes, want 32", keyNS, name, hashkey.DataKey, len(key))
	}
	return key
}

// expected is the stamp of the Deployment's template from live reads with Secrets
// counted under key: what configstamp should have written.
func expected(t testing.TB, d *appsv1.Deployment, key []byte) stamp.Stamp {
	t.Helper()
	srcs := stamp.Consumed(d.Annotations, &d.Spec.Template.Spec, stamp.Options{Secrets: true})
	st, err := stamp.Compute(bg, srcs, configread.Lookup(env.Client, d.Namespace), stamp.NamespaceKey(key, d.Namespace))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stampedWith asserts that the Deployment (rolled out) carries the stamp of its current
// config with Secrets keyed by key, and returns it.
func stampedWith(t testing.TB, ns, name string, key []byte) *appsv1.Deployment {
	t.Helper()
	d := env.RolledOut(t, ns, name)
	want := expected(t, d, key)
	if got := d.Spec.Template.Annotations[stamp.HashAnnotation]; got != want.Hash {
		t.Fatalf("%s: config hash %q, want %q (sources %q, want %q)", name, got, want.Hash,
			d.Spec.Template.Annotations[stamp.SourcesAnnotation], want.SourcesAnnotation())
	}
	if got := d.Spec.Template.Annotations[stamp.SourcesAnnotation]; got != want.SourcesAnnotation() {
		t.Fatalf("%s: sources %q, want %q", name, got, want.SourcesAnnotation())
	}
	return d
}

// logLines counts a configstamp process's log records with msg about ns/name.
func logLines(cs *framework.Configstamp, msg, ns, name string) int {
	n := 0
	for _, rec := range cs.Logs() {
		if rec["msg"] == msg && rec["namespace"] == ns && rec["name"] == name {
			n++
		}
	}
	return n
}

// decisions are the watcher's log messages that end a check of a workload.
var decisions = []string{"Config current", "Recorded the config the pods run", "Nudged Deployment after a config change"}

// checks counts the watcher's finished checks of a Deployment so far.
func checks(cs *framework.Configstamp, ns, name string) int {
	n := 0
	for _, msg := range decisions {
		n += logLines(cs, msg, ns, name)
	}
	return n
}

// checkedAfter waits until the watcher has finished more than before checks of the
// Deployment: proof that a change was looked at, so that a later count of ReplicaSets
// over settle is not vacuous.
func checkedAfter(t testing.TB, cs *framework.Configstamp, ns, name string, before int) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, "watcher check of "+name, func() error {
		if n := checks(cs, ns, name); n <= before {
			return fmt.Errorf("%d checks, want more than %d", n, before)
		}
		return nil
	})
}

// The documented encoding (docs/hash.md), written out again here so the keyed and
// unkeyed digests are checked against the text, not against stamp.

func encodeSource(kind, name string, keys []string, data map[string]string) []byte {
	var b bytes.Buffer
	str := func(s string) { _ = binary.Write(&b, binary.BigEndian, uint64(len(s))); b.WriteString(s) }
	str(kind)
	str(name)
	str("present")
	if keys == nil {
		for k := range data {
			keys = append(keys, k)
		}
	}
	keys = slices.Clone(keys)
	slices.Sort(keys)
	_ = binary.Write(&b, binary.BigEndian, uint64(len(keys)))
	for _, k := range keys {
		str(k)
		if v, ok := data[k]; ok {
			str("data")
			str(v)
		} else {
			str("missing")
		}
	}
	return b.Bytes()
}

// configHash is the config hash over per-source digests.
func configHash(digests ...[]byte) string {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, uint64(len(stamp.EncodingVersion)))
	b.WriteString(stamp.EncodingVersion)
	for _, d := range digests {
		b.Write(d)
	}
	return hexSum(b.Bytes())
}

func sum(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func hexSum(b []byte) string { return hex.EncodeToString(sum(b)) }

// namespaceKey is the key of one namespace's Secret digests, as documented.
func namespaceKey(key []byte, ns string) []byte {
	var b bytes.Buffer
	for _, s := range []string{"configstamp/namespace", ns} {
		_ = binary.Write(&b, binary.BigEndian, uint64(len(s)))
		b.WriteString(s)
	}
	return keyed(key, b.Bytes())
}

func keyed(key, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)
}

// Audit log.

// auditMark is where the audit log ends now: events after it belong to what follows.
func auditMark() bench.AuditMark { return bench.MarkAudit(env.Cluster.AuditLog) }

// auditSince returns configstamp's user's audit events logged after mark. It reads
// strictly: "secrets disabled" asserts that no event of configstamp's user is on a
// Secret, which a line skipped as unreadable could hide.
func auditSince(t testing.TB, mark bench.AuditMark) []bench.AuditEvent {
	t.Helper()
	var out []bench.AuditEvent
	if err := bench.ReadAuditStrict(env.Cluster.AuditLog, mark, func(ev *bench.AuditEvent) {
		if ev.User.Username == cluster.ConfigstampUser {
			out = append(out, *ev)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TLS certificates as cert-manager's CA issuer writes them.

// issue returns a fresh CA and a leaf certificate for dnsName signed by it, PEM-encoded.
func issue(t testing.TB, dnsName string) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "test-ca"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano() + 1), Subject: pkix.Name{CommonName: dnsName}, DNSNames: []string{dnsName},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// certManagerAnnotations are the annotations cert-manager writes on a Certificate's
// Secret, with the revision of the Certificate the content was issued for.
func certManagerAnnotations(name, dnsName string, revision int) map[string]string {
	return map[string]string{
		"cert-manager.io/certificate-name": name,
		"cert-manager.io/issuer-name":      "ca-issuer",
		"cert-manager.io/issuer-kind":      "Issuer",
		"cert-manager.io/issuer-group":     "cert-manager.io",
		"cert-manager.io/common-name":      dnsName,
		"cert-manager.io/alt-names":        dnsName,
		"cert-manager.io/ip-sans":          "",
		"cert-manager.io/uri-sans":         "",
		// A revision-ish annotation, as on cert-manager's CertificateRequests.
		"cert-manager.io/certificate-revision": fmt.Sprint(revision),
	}
}

// contains reports which of needles (hex digests, checked whole and as the 12-character
// prefix the sources annotation shows) occur in haystack.
func contains(haystack string, needles map[string]string) []string {
	var found []string
	for what, n := range needles {
		for _, s := range []string{n, n[:12]} {
			if strings.Contains(haystack, s) {
				found = append(found, fmt.Sprintf("%s (%s)", what, s))
				break
			}
		}
	}
	slices.Sort(found)
	return found
}
