// Package hashkey keeps the HMAC key configstamp keys every digest with (per namespace,
// stamp.NamespaceKey). A stamp is visible to anyone who can read a workload, and a
// review posted to the webhook answers with one; keyed digests keep them from testing
// guesses of a ConfigMap's or Secret's content. The key lives in one Secret that every
// replica converges on.
package hashkey

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

const (
	// DataKey is the data key of the Secret that holds the key.
	DataKey = "key"
	// Size is the length of the key in bytes: SHA-256's output, the least RFC 2104 advises
	// for HMAC-SHA256.
	Size = 32

	// DescriptionAnnotation tells whoever finds the Secret what it is and how to rotate it.
	DescriptionAnnotation = "configstamp.io/description"
	// Description is the value of DescriptionAnnotation.
	Description = "HMAC key of the digests in config stamps; removing its data key \"key\" rotates it, rolling every stamped workload once"

	nameLabel = "app.kubernetes.io/name"
	nameValue = "configstamp"

	// attempts bounds the rounds of read and write. Each lost race leaves the Secret
	// holding a valid key, so a round after any single loss returns; a few cover a
	// deletion racing a creation.
	attempts = 5
)

// errLostRace marks a write that another writer got in before: read again.
var errLostRace = errors.New("lost a race with another writer")

// Ensure returns the key stored under DataKey of the Secret ref, so that every replica of
// configstamp digests with the same key. A Secret without a valid key (the chart creates
// it empty; or not Size bytes) gets a fresh random key by an Update conditional on its
// resourceVersion: replicas racing converge, a Conflict re-reads and uses whatever is
// there then (the chart's self policy denies the Update over a key of the wrong size:
// removed by hand, it is filled). A Secret that does not exist is created (dev mode,
// tests: the chart grants no create), and a Create that finds it already there re-reads it.
//
// c must read from the API server directly (client.New), never through a manager's cache:
// a cached Get on a Secret would start an informer over every Secret in the cluster,
// holding them all in memory and needing list and watch on all of them. The caller needs
// get and update on the Secret, and create only when it does not exist.
//
// The key is never logged.
func Ensure(ctx context.Context, c client.Client, ref types.NamespacedName) ([]byte, error) {
	var lastErr error
	for range attempts {
		key, err := ensureOnce(ctx, c, ref)
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, errLostRace) {
			return nil, err
		}
		lastErr = err
	}
	return nil, fmt.Errorf("hash key secret %s: no stable key after %d attempts: %w", ref, attempts, lastErr)
}

// ensureOnce is one round: read, then create or repair. errLostRace means read again.
func ensureOnce(ctx context.Context, c client.Client, ref types.NamespacedName) ([]byte, error) {
	var s corev1.Secret
	err := c.Get(ctx, ref, &s)
	switch {
	case apierrors.IsNotFound(err):
		return create(ctx, c, ref)
	case err != nil:
		return nil, fmt.Errorf("get hash key secret %s: %w", ref, err)
	}
	switch key := s.Data[DataKey]; len(key) {
	case Size:
		return key, nil
	case 0:
		return repair(ctx, c, &s)
	default:
		// Someone's own key, of the wrong length (a trailing newline, base64 text, 64
		// bytes): never overwritten, or a GitOps tool writing it back and configstamp
		// replacing it would rotate the key, and roll every workload, on each sync.
		return nil, fmt.Errorf("hash key secret %s: data key %q holds %d bytes, want %d raw bytes (or remove it, and configstamp writes a random key)", ref, DataKey, len(key), Size)
	}
}

func create(ctx context.Context, c client.Client, ref types.NamespacedName) ([]byte, error) {
	key := newKey()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   ref.Namespace,
			Name:        ref.Name,
			Labels:      map[string]string{nameLabel: nameValue},
			Annotations: map[string]string{DescriptionAnnotation: Description},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{DataKey: key},
	}
	err := c.Create(ctx, s)
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, fmt.Errorf("create hash key secret %s: %w", ref, errLostRace)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("create hash key secret %s: it does not exist, and configstamp may not create it (the chart creates it; create it empty, configstamp fills it): %w", ref, err)
	case err != nil:
		return nil, fmt.Errorf("create hash key secret %s: %w", ref, err)
	}
	log.FromContext(ctx).Info("Created hash key secret", "namespace", ref.Namespace, "name", ref.Name)
	return key, nil
}

// repair writes a fresh key into a Secret that has none, conditional on the
// resourceVersion it was read at. Its other data, labels and annotations are kept.
func repair(ctx context.Context, c client.Client, s *corev1.Secret) ([]byte, error) {
	ref := client.ObjectKeyFromObject(s)
	key := newKey()
	if s.Data == nil {
		s.Data = map[string][]byte{}
	}
	s.Data[DataKey] = key
	if _, ok := s.Labels[nameLabel]; !ok {
		metav1.SetMetaDataLabel(&s.ObjectMeta, nameLabel, nameValue)
	}
	if _, ok := s.Annotations[DescriptionAnnotation]; !ok {
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, DescriptionAnnotation, Description)
	}
	err := c.Update(ctx, s)
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil, fmt.Errorf("update hash key secret %s: %w", ref, errLostRace)
	case err != nil:
		return nil, fmt.Errorf("update hash key secret %s: %w", ref, err)
	}
	log.FromContext(ctx).Info("Wrote a new key into hash key secret", "namespace", ref.Namespace, "name", ref.Name)
	return key, nil
}

// newKey draws a fresh key. crypto/rand.Read never returns an error: it crashes the
// program rather than hand out a weak key.
func newKey() []byte {
	key := make([]byte, Size)
	_, _ = rand.Read(key)
	return key
}

// ParseRef parses the "namespace/name" of the hash key Secret, as given on the command line.
func ParseRef(s string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return types.NamespacedName{}, fmt.Errorf("hash key secret %q: want namespace/name", s)
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("hash key secret %q: namespace %q: %s", s, ns, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return types.NamespacedName{}, fmt.Errorf("hash key secret %q: name %q: %s", s, name, strings.Join(errs, "; "))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}
