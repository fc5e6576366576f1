package hashkey

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

var ref = types.NamespacedName{Namespace: "configstamp-system", Name: "configstamp-hash-key"}

var secretsGR = schema.GroupResource{Resource: "secrets"}

func secret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name}, Data: data}
}

func get(t *testing.T, c client.Client) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), ref, &s); err != nil {
		t.Fatalf("get secret: %v", err)
	}
	return &s
}

func TestEnsureCreates(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	key, err := Ensure(context.Background(), c, ref)
	if err != nil {
		t.Fatal(err)
	}
	if len(key) != Size {
		t.Fatalf("key of %d bytes, want %d", len(key), Size)
	}
	if bytes.Equal(key, make([]byte, Size)) {
		t.Fatal("key is all zeroes")
	}
	s := get(t, c)
	if !bytes.Equal(s.Data[DataKey], key) {
		t.Fatal("returned key differs from the stored one")
	}
	if s.Type != corev1.SecretTypeOpaque {
		t.Errorf("type %q, want Opaque", s.Type)
	}
	if s.Labels["app.kubernetes.io/name"] != "configstamp" {
		t.Errorf("labels %v", s.Labels)
	}
	if s.Annotations[DescriptionAnnotation] != Description {
		t.Errorf("annotations %v", s.Annotations)
	}
	if s.Immutable != nil && *s.Immutable {
		t.Error("secret is immutable: rotation by deletion is the only way, but repair needs an update")
	}

	again, err := Ensure(context.Background(), c, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again, key) {
		t.Fatal("second call returned a different key")
	}
	other, err := Ensure(context.Background(), fake.NewClientBuilder().Build(), ref)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(other, key) {
		t.Fatal("two fresh secrets got the same key")
	}
}

func TestEnsureReusesWithoutWriting(t *testing.T) {
	want := bytes.Repeat([]byte{7}, Size)
	writes := 0
	c := fake.NewClientBuilder().WithObjects(secret(map[string][]byte{DataKey: want})).
		WithInterceptorFuncs(interceptor.Funcs{
			Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
				writes++
				return c.Create(ctx, obj, opts...)
			},
			Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
				writes++
				return c.Update(ctx, obj, opts...)
			},
		}).Build()
	key, err := Ensure(context.Background(), c, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(key, want) {
		t.Fatalf("key %x, want the stored %x", key, want)
	}
	if writes != 0 {
		t.Fatalf("%d writes, want none", writes)
	}
}

// A key of the wrong length is someone's own: an error, never overwritten.
func TestEnsureRefusesAKeyOfTheWrongLength(t *testing.T) {
	for _, key := range [][]byte{[]byte("short"), append(bytes.Repeat([]byte{1}, Size), '\n'), bytes.Repeat([]byte{1}, 2*Size)} {
		c := fake.NewClientBuilder().WithObjects(secret(map[string][]byte{DataKey: key})).Build()
		before := get(t, c)
		if _, err := Ensure(context.Background(), c, ref); err == nil {
			t.Errorf("a key of %d bytes: no error", len(key))
		}
		if after := get(t, c); after.ResourceVersion != before.ResourceVersion || !bytes.Equal(after.Data[DataKey], key) {
			t.Errorf("a key of %d bytes was overwritten", len(key))
		}
	}
}

func TestEnsureRepairs(t *testing.T) {
	for _, tc := range []struct {
		name string
		data map[string][]byte
	}{
		{"NoData", nil},
		{"NoKey", map[string][]byte{"other": []byte("kept")}},
		{"EmptyKey", map[string][]byte{DataKey: {}, "other": []byte("kept")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			existing := secret(tc.data)
			existing.Labels = map[string]string{"team": "platform"}
			c := fake.NewClientBuilder().WithObjects(existing).Build()
			before := get(t, c)
			key, err := Ensure(context.Background(), c, ref)
			if err != nil {
				t.Fatal(err)
			}
			if len(key) != Size {
				t.Fatalf("key of %d bytes", len(key))
			}
			s := get(t, c)
			if !bytes.Equal(s.Data[DataKey], key) {
				t.Fatal("returned key differs from the stored one")
			}
			if s.ResourceVersion == before.ResourceVersion {
				t.Fatal("secret not updated")
			}
			if tc.data["other"] != nil && string(s.Data["other"]) != "kept" {
				t.Errorf("other data lost: %v", s.Data)
			}
			if s.Labels["team"] != "platform" || s.Labels["app.kubernetes.io/name"] != "configstamp" {
				t.Errorf("labels %v", s.Labels)
			}
			if s.Annotations[DescriptionAnnotation] != Description {
				t.Errorf("annotations %v", s.Annotations)
			}
		})
	}
}

// A replica that loses the race to create the Secret uses the winner's key, not its own.
func TestEnsureCreateLosesRace(t *testing.T) {
	winner := bytes.Repeat([]byte{0xAB}, Size)
	creates := 0
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			creates++
			if creates == 1 {
				// Another replica creates it between our Get and our Create.
				if err := c.Create(ctx, secret(map[string][]byte{DataKey: winner})); err != nil {
					return err
				}
			}
			return c.Create(ctx, obj, opts...)
		},
	}).Build()
	key, err := Ensure(context.Background(), c, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(key, winner) {
		t.Fatalf("key %x, want the winner's %x", key, winner)
	}
	if creates != 1 {
		t.Fatalf("%d creates, want 1", creates)
	}
	if got := get(t, c).Data[DataKey]; !bytes.Equal(got, winner) {
		t.Fatalf("stored key %x, want the winner's", got)
	}
}

// A replica that loses the race to repair the Secret uses the winner's key, not its own:
// its Update is conditional on the resourceVersion it read.
func TestEnsureRepairLosesRace(t *testing.T) {
	winner := bytes.Repeat([]byte{0xCD}, Size)
	updates := 0
	var conflict error
	c := fake.NewClientBuilder().WithObjects(secret(nil)).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			if updates == 1 {
				// Another replica repairs it between our Get and our Update.
				var s corev1.Secret
				if err := c.Get(ctx, ref, &s); err != nil {
					return err
				}
				s.Data = map[string][]byte{DataKey: winner}
				if err := c.Update(ctx, &s); err != nil {
					return err
				}
				conflict = c.Update(ctx, obj, opts...)
				return conflict
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	key, err := Ensure(context.Background(), c, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !apierrors.IsConflict(conflict) {
		t.Fatalf("the losing update got %v, want a Conflict", conflict)
	}
	if !bytes.Equal(key, winner) {
		t.Fatalf("key %x, want the winner's %x", key, winner)
	}
	if updates != 1 {
		t.Fatalf("%d updates, want 1", updates)
	}
}

// The Secret deleted between the read and the repair: the next round creates it.
func TestEnsureRepairFindsDeleted(t *testing.T) {
	updates := 0
	c := fake.NewClientBuilder().WithObjects(secret(nil)).WithInterceptorFuncs(interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			updates++
			if err := c.Delete(ctx, secret(nil)); err != nil {
				return err
			}
			return c.Update(ctx, obj, opts...)
		},
	}).Build()
	key, err := Ensure(context.Background(), c, ref)
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, c).Data[DataKey]; !bytes.Equal(got, key) {
		t.Fatal("returned key differs from the stored one")
	}
	if updates != 1 {
		t.Fatalf("%d updates, want 1", updates)
	}
}

func TestEnsureGivesUp(t *testing.T) {
	creates := 0
	c := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			creates++
			return apierrors.NewAlreadyExists(secretsGR, ref.Name)
		},
	}).Build()
	_, err := Ensure(context.Background(), c, ref)
	if err == nil {
		t.Fatal("no error")
	}
	if creates != attempts {
		t.Fatalf("%d creates, want %d", creates, attempts)
	}
	if !strings.Contains(err.Error(), ref.String()) || !strings.Contains(err.Error(), "attempts") {
		t.Fatalf("unclear error: %v", err)
	}
}

func TestEnsureErrors(t *testing.T) {
	forbidden := apierrors.NewForbidden(secretsGR, ref.Name, errors.New("no RBAC"))
	for _, tc := range []struct {
		name     string
		existing *corev1.Secret
		funcs    interceptor.Funcs
		want     string
	}{
		{"Get", nil, interceptor.Funcs{Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return forbidden
		}}, "get hash key secret " + ref.String()},
		{"Create", nil, interceptor.Funcs{Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return forbidden
		}}, "create hash key secret " + ref.String()},
		{"Update", secret(nil), interceptor.Funcs{Update: func(context.Context, client.WithWatch, client.Object, ...client.UpdateOption) error {
			return forbidden
		}}, "update hash key secret " + ref.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithInterceptorFuncs(tc.funcs)
			if tc.existing != nil {
				b = b.WithObjects(tc.existing)
			}
			key, err := Ensure(context.Background(), b.Build(), ref)
			if err == nil || key != nil {
				t.Fatalf("key %x, err %v: want an error", key, err)
			}
			if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to wrap Forbidden and start %q", err, tc.want)
			}
		})
	}
}

// Creating and repairing log what happened, never the key itself.
func TestEnsureNeverLogsKey(t *testing.T) {
	var logs strings.Builder
	ctx := log.IntoContext(context.Background(), funcr.New(func(prefix, args string) {
		logs.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 10}))
	created, err := Ensure(ctx, fake.NewClientBuilder().Build(), ref)
	if err != nil {
		t.Fatal(err)
	}
	repaired, err := Ensure(ctx, fake.NewClientBuilder().WithObjects(secret(nil)).Build(), ref)
	if err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	if !strings.Contains(out, "Created hash key secret") || !strings.Contains(out, "Wrote a new key") {
		t.Fatalf("expected log lines missing: %s", out)
	}
	for _, key := range [][]byte{created, repaired} {
		for _, enc := range []string{string(key), hex.EncodeToString(key), base64.StdEncoding.EncodeToString(key), base64.RawStdEncoding.EncodeToString(key)} {
			if strings.Contains(out, enc) {
				t.Fatalf("the key appears in the logs: %s", out)
			}
		}
	}
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want types.NamespacedName
		err  string
	}{
		{in: "configstamp-system/configstamp-hash-key", want: types.NamespacedName{Namespace: "configstamp-system", Name: "configstamp-hash-key"}},
		{in: "ns/key.v1", want: types.NamespacedName{Namespace: "ns", Name: "key.v1"}},
		{in: "", err: "want namespace/name"},
		{in: "name-only", err: "want namespace/name"},
		{in: "/name", err: "want namespace/name"},
		{in: "ns/", err: "want namespace/name"},
		{in: "/", err: "want namespace/name"},
		{in: "ns/a/b", err: `name "a/b"`},
		{in: "Bad_NS/name", err: `namespace "Bad_NS"`},
		{in: "ns.dotted/name", err: `namespace "ns.dotted"`},
		{in: "ns/Upper", err: `name "Upper"`},
		{in: "ns/" + strings.Repeat("a", 254), err: "name"},
		{in: strings.Repeat("a", 64) + "/name", err: "namespace"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseRef(tc.in)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParseRef(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseRef(%q) = %v, want an error", tc.in, got)
			}
			if !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "hash key secret") {
				t.Fatalf("ParseRef(%q) error %q, want it to mention %q", tc.in, err, tc.err)
			}
		})
	}
}
