package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/cluster"
)

// SelfPolicyEnv, set to any value, has Main install the chart's policy restricting
// configstamp's own identity (InstallSelfPolicy) before the tests run: make
// test-precision CONFIGSTAMP_TEST_SELF_POLICY=1 runs the precision suite under it.
const SelfPolicyEnv = "CONFIGSTAMP_TEST_SELF_POLICY"

// SelfPolicyFile holds the chart's policies (templates/selfpolicy.yaml renders them).
var SelfPolicyFile = filepath.Join(cluster.RepoRoot(), "deploy", "helm", "configstamp", "files", "selfpolicy.yaml")

// SelfPolicy is the chart's ValidatingAdmissionPolicies and bindings restricting
// configstamp's own ServiceAccount, for user instead (the objects of SelfPolicyFile,
// which the chart renders with its labels and the ServiceAccount's name).
func SelfPolicy(user string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(SelfPolicyFile)
	if err != nil {
		return nil, err
	}
	const placeholder = "CONFIGSTAMP_USERNAME"
	if !bytes.Contains(b, []byte(placeholder)) {
		return nil, fmt.Errorf("%s names no %s", SelfPolicyFile, placeholder)
	}
	var objs []*unstructured.Unstructured
	// One user here: it keeps the caBundle too (the chart names the webhook role's).
	b = bytes.ReplaceAll(b, []byte("CONFIGSTAMP_CA_USERNAME"), []byte(user))
	b = bytes.ReplaceAll(b, []byte("CONFIGSTAMP_HASH_KEY"), []byte(HashKeyName))
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(bytes.ReplaceAll(b, []byte(placeholder), []byte(user))), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	if len(objs) == 0 {
		return nil, errors.New("no policy in " + SelfPolicyFile)
	}
	return objs, nil
}

// InstallSelfPolicy installs the chart's policy for the configstamp user (SelfPolicy)
// and waits until the API server enforces it; remove deletes it.
func (e *Env) InstallSelfPolicy(ctx context.Context) (remove func(), err error) {
	objs, err := SelfPolicy(cluster.ConfigstampUser)
	if err != nil {
		return nil, err
	}
	remove = func() {
		for _, o := range objs {
			_ = e.Client.Delete(context.Background(), o)
		}
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			remove()
			return nil, fmt.Errorf("create %s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if err := e.waitSelfPolicy(ctx); err != nil {
		remove()
		return nil, err
	}
	return remove, nil
}

// waitSelfPolicy waits until the configstamp user's dry-run change of a Deployment's
// image is denied: the API server has the policy.
func (e *Env) waitSelfPolicy(ctx context.Context) error {
	const ns = "configstamp-policy-probe"
	e.createNamespace(ctx, ns)
	d := ProbeDeployment()
	d.Namespace = ns
	if err := e.Client.Create(ctx, d); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	as, err := e.ConfigstampClient()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var cur appsv1.Deployment
		err := as.Get(ctx, client.ObjectKeyFromObject(d), &cur)
		if err == nil {
			cur.Spec.Template.Spec.Containers[0].Image += "-changed"
			err = as.Update(ctx, &cur, client.DryRunAll)
			if apierrors.IsInvalid(err) || apierrors.IsForbidden(err) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the policy restricting configstamp is not enforced after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ConfigstampClient is a client acting as the configstamp user.
func (e *Env) ConfigstampClient() (client.Client, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.Cluster.ConfigstampKubeconfig)
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: e.Client.Scheme()})
}

func (e *Env) createNamespace(ctx context.Context, name string) {
	_ = e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
}

// installSelfPolicyFromEnv installs the policy when SelfPolicyEnv is set.
func installSelfPolicyFromEnv(ctx context.Context, e *Env) (func(), error) {
	if os.Getenv(SelfPolicyEnv) == "" {
		return func() {}, nil
	}
	fmt.Println("installing the chart's policy restricting configstamp's identity (" + SelfPolicyEnv + ")")
	return e.InstallSelfPolicy(ctx)
}
