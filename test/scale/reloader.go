package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/test/framework"
)

// reloaderVersion is -reloader: the Stakater Reloader release the peer measurements run
// against ("" skips them).
var reloaderVersion string

const (
	reloaderModule = "github.com/stakater/Reloader"
	// reloaderAuto is the annotation that opts a workload in to Reloader for every
	// ConfigMap and Secret it consumes.
	reloaderAuto = "reloader.stakater.com/auto"
	// reloaderNS holds Reloader's ServiceAccount and its readiness probe.
	reloaderNS = "reloader"
	// reloaderUser is Reloader's identity in the audit log.
	reloaderUser = "system:serviceaccount:" + reloaderNS + ":reloader"
	// reloaderListen is where Reloader serves metrics and liveness; it has no flag for it.
	reloaderListen = ":9090"
)

// peerDeployment is deployment(name, cm) as both tools act on it: the container mounts
// the ConfigMap's volume (Reloader's auto mode rolls a workload only for a source one of
// its containers mounts or names in env), and it carries Reloader's opt-in annotation,
// which configstamp ignores.
func peerDeployment(name, cm string) *appsv1.Deployment {
	d := deployment(name, cm)
	d.Annotations = map[string]string{reloaderAuto: "true"}
	d.Spec.Template.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: cm, MountPath: "/etc/" + cm}}
	return d
}

// reloaderOpenshiftAPI is the github.com/openshift/api version Reloader is built with:
// the one its github.com/openshift/client-go requires. Reloader's own go.mod asks for a
// later one the Go module proxy does not serve (403); the OpenShift types matter only on
// OpenShift (DeploymentConfigs).
const reloaderOpenshiftAPI = "github.com/openshift/api@v0.0.0-20260326111139-30c2ef7a272e"

// buildReloader builds Reloader at reloaderVersion from its module (served by the Go
// module proxy; `go install` refuses it for its replace directives), with
// reloaderOpenshiftAPI, once, into the user's cache directory outside the clone (about
// 6 minutes cold), and returns the binary.
func buildReloader(ctx context.Context) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(cache, "configstamp", "reloader-"+reloaderVersion, "reloader")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", reloaderModule+"@"+reloaderVersion).Output()
	if err != nil {
		return "", fmt.Errorf("download %s@%s: %w", reloaderModule, reloaderVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return "", fmt.Errorf("module dir of %s@%s: %v %s", reloaderModule, reloaderVersion, err, out)
	}
	src, err := os.MkdirTemp("", "reloader-src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := os.CopyFS(src, os.DirFS(mod.Dir)); err != nil {
		return "", err
	}
	for _, args := range [][]string{
		{"mod", "edit", "-replace", "github.com/openshift/api=" + reloaderOpenshiftAPI},
		{"build", "-mod=mod", "-o", bin, "."},
	} {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = src
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("go %s for %s@%s: %w", strings.Join(args, " "), reloaderModule, reloaderVersion, err)
		}
	}
	return bin, nil
}

// reloaderProcess is one Reloader process, run as a ServiceAccount bound to
// cluster-admin (its requests then show in the audit log under reloaderUser).
type reloaderProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	out  bytes.Buffer
}

func (p *reloaderProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *reloaderProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startReloader starts Reloader with its defaults (global mode: every namespace) and
// returns once it acts: a probe ConfigMap, edited until Reloader has given its probe
// Deployment (no replicas) a new generation.
func startReloader(ctx context.Context, env *framework.Env, bin string) (*reloaderProcess, error) {
	if l, err := net.Listen("tcp", reloaderListen); err != nil {
		return nil, fmt.Errorf("reloader serves on %s, which is taken: %w", reloaderListen, err)
	} else {
		l.Close()
	}
	cs := clients(env)
	kubeconfig, err := reloaderIdentity(ctx, env, cs)
	if err != nil {
		return nil, err
	}
	p := &reloaderProcess{done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--log-level", "info")
	var environ []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBERNETES_NAMESPACE=") && !strings.HasPrefix(kv, "RELOADER_NAMESPACE=") {
			environ = append(environ, kv)
		}
	}
	p.cmd.Env = append(environ, "KUBECONFIG="+kubeconfig)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	if err := reloaderActs(ctx, cs, p); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w\nreloader log:\n%s", err, p.output())
	}
	return p, nil
}

// reloaderIdentity creates (once) Reloader's ServiceAccount, bound to cluster-admin, and
// its probe objects, and writes a kubeconfig with a token of it.
func reloaderIdentity(ctx context.Context, env *framework.Env, cs kubernetes.Interface) (string, error) {
	create := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err := create(namespace(ctx, cs, reloaderNS)); err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().ServiceAccounts(reloaderNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reloader"}}, metav1.CreateOptions{}); create(err) != nil {
		return "", err
	}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "reloader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: reloaderNS, Name: "reloader"}}}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); create(err) != nil {
		return "", err
	}
	if _, err := cs.CoreV1().ConfigMaps(reloaderNS).Create(ctx, configMap("probe", 64), metav1.CreateOptions{}); create(err) != nil {
		return "", err
	}
	if _, err := cs.AppsV1().Deployments(reloaderNS).Create(ctx, peerDeployment("probe", "probe"), metav1.CreateOptions{}); create(err) != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "reloader-")
	if err != nil {
		return "", err
	}
	return env.WriteServiceAccountKubeconfig(ctx, reloaderNS, "reloader", dir)
}

// reloaderActs edits the probe ConfigMap until Reloader gives the probe Deployment a new
// generation (its informers have synced and it acts on updates).
func reloaderActs(ctx context.Context, cs kubernetes.Interface, p *reloaderProcess) error {
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		select {
		case <-p.done:
			return fmt.Errorf("reloader exited")
		default:
		}
		d, err := cs.AppsV1().Deployments(reloaderNS).Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, err := cs.CoreV1().ConfigMaps(reloaderNS).Patch(ctx, "probe", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"data":{"probe":"%d-%d"}}`, time.Now().UnixNano(), i)), metav1.PatchOptions{}); err != nil {
			return err
		}
		for until := time.Now().Add(2 * time.Second); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
			now, err := cs.AppsV1().Deployments(reloaderNS).Get(ctx, "probe", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if now.Generation > d.Generation {
				return nil
			}
		}
	}
	return fmt.Errorf("reloader did not act on a probe ConfigMap within 2m")
}

// stop ends Reloader (SIGTERM, then SIGKILL after 10 s).
func (p *reloaderProcess) stop() { cluster.Terminate(p.cmd.Process, p.done, 10*time.Second) }

// noRegistration checks that no webhook registration is left, so Reloader's writes pay
// for no configstamp webhook call (a registration outliving its process would still be
// called, and fail open, on every write).
func noRegistration(ctx context.Context, cs kubernetes.Interface) error {
	list, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	if len(list.Items) > 0 {
		return fmt.Errorf("a webhook registration is left (%s): Reloader's writes would call it", list.Items[0].Name)
	}
	return nil
}
