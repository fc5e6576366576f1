package notify

import (
	"context"
	"fmt"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// URLFromFile reads the URL from a file (a mounted Secret's key) on every message, so a
// rotated Secret is followed.
func URLFromFile(path string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		return check(string(b))
	}
}

// URLFromSecret reads the URL from key of a Secret, live through r, on every message.
func URLFromSecret(r client.Reader, ref types.NamespacedName, key string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var s corev1.Secret
		if err := r.Get(ctx, ref, &s); err != nil {
			return "", fmt.Errorf("get secret %s: %w", ref, err)
		}
		v, ok := s.Data[key]
		if !ok {
			return "", fmt.Errorf("secret %s has no key %q", ref, key)
		}
		return check(string(v))
	}
}

// check trims a URL and wants http or https (its value is never in an error).
func check(v string) (string, error) {
	v = strings.TrimSpace(v)
	if !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
		return "", fmt.Errorf("the notification URL is not an http(s) URL")
	}
	return v, nil
}
