// Command demo brings up a local control plane (etcd, kube-apiserver, controller-manager,
// scheduler and kwok fake nodes), runs configstamp against it the way a user runs it
// locally, and shows a ConfigMap edit rolling a Deployment, with the audit trail.
//
//	make demo            (DEMO_KEEP=1 keeps everything running until Ctrl-C)
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/stamp"
	"github.com/configstamp/configstamp/test/cluster"
	"github.com/configstamp/configstamp/webhook"
)

const ns = "demo"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func step(format string, args ...any) { fmt.Printf("\n==> "+format+"\n", args...) }

func run(ctx context.Context) error {
	step("Starting a local control plane: etcd, kube-apiserver (audit log on), controller-manager, scheduler, kwok with 3 fake nodes")
	c, err := cluster.Start(ctx, cluster.Options{Controllers: true, Log: func(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }})
	if err != nil {
		return err
	}
	defer c.Stop()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}

	tmp, err := os.MkdirTemp("", "configstamp-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "configstamp")
	step("Building configstamp")
	build := exec.Command("go", "build", "-o", bin, "./cmd/configstamp")
	build.Dir, build.Stdout, build.Stderr = cluster.RepoRoot(), os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		return err
	}
	port, err := cluster.FreePort()
	if err != nil {
		return err
	}
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	args := []string{"--kubeconfig", c.ConfigstampKubeconfig, "--dev-webhook-url", url, "--hash-key", "default/configstamp-hash-key", "--webhook-port", fmt.Sprint(port),
		"--webhook-host", "127.0.0.1", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	step("Running: configstamp %s", strings.Join(args, " "))
	proc := exec.Command(bin, args...)
	proc.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logs, err := proc.StderrPipe()
	if err != nil {
		return err
	}
	proc.Stdout = os.Stdout
	if err := proc.Start(); err != nil {
		return err
	}
	defer func() { _ = proc.Process.Signal(syscall.SIGTERM); _ = proc.Wait() }()
	logFile := filepath.Join(tmp, "configstamp.log")
	go printAudit(logs, logFile)

	step("Namespace %q opts in with the label %s=%s", ns, stamp.InjectLabel, stamp.InjectValue)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{stamp.InjectLabel: stamp.InjectValue}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "gateway-apis"}, Data: map[string]string{
		"routes.yaml": "routes:\n- path: /orders\n  backend: orders:8080\n"}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	dep := gateway()
	// The webhook registers itself once its server serves; retry until it stamps.
	step("Creating Deployment gateway (no checksum annotation anywhere in it), mounting ConfigMap gateway-apis")
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && d.Spec.Template.Annotations[stamp.HashAnnotation] != "", nil
	}); err != nil {
		return fmt.Errorf("configstamp's webhook did not answer: %w", err)
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := waitRolledOut(ctx, cs, 1); err != nil {
		return err
	}
	if err := showReplicaSets(ctx, cs); err != nil {
		return err
	}

	step("kubectl edit configmap gateway-apis: add a route (outside Git, no chart involved)")
	patch := `{"data":{"routes.yaml":"routes:\n- path: /orders\n  backend: orders:8080\n- path: /invoices\n  backend: invoices:8080\n"}}`
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "gateway-apis", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return err
	}
	fmt.Println("    waiting for the ConfigMap to be quiet (debounce 2s), then for the rollout")
	if err := waitRolledOut(ctx, cs, 2); err != nil {
		return err
	}
	if err := showReplicaSets(ctx, cs); err != nil {
		return err
	}

	step("Why did it roll? configstamp explain deployment/gateway (also: kubectl configstamp explain, as a plugin)")
	explain := exec.Command(bin, "explain", "-n", ns, "deployment/gateway", "--kubeconfig", c.Kubeconfig, "--registration-name", webhook.DevConfigurationName)
	out, err := explain.CombinedOutput()
	if err != nil {
		return fmt.Errorf("configstamp explain: %w: %s", err, out)
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Println("    " + line)
	}

	step("Relabelling the ConfigMap (metadata only, nothing the pods can see): no rollout")
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "gateway-apis", types.MergePatchType, []byte(`{"metadata":{"labels":{"owner":"platform"}}}`), metav1.PatchOptions{}); err != nil {
		return err
	}
	time.Sleep(5 * time.Second)
	if err := showReplicaSets(ctx, cs); err != nil {
		return err
	}
	if err := waitRolledOut(ctx, cs, 2); err != nil {
		return fmt.Errorf("a metadata-only edit changed the rollout: %w", err)
	}

	step("The API server's audit log: the webhook's audit annotations on Deployment writes")
	if err := showAPIAudit(c.AuditLog); err != nil {
		return err
	}
	step("Done: one ConfigMap edit, one rollout; a metadata-only edit, none.")
	if os.Getenv("DEMO_KEEP") != "" {
		fmt.Printf("\nDEMO_KEEP is set: the cluster keeps running. Try:\n  export KUBECONFIG=%s\n  kubectl -n %s edit configmap gateway-apis\nCtrl-C to stop.\n", c.Kubeconfig, ns)
		<-ctx.Done()
	}
	return nil
}

func gateway() *appsv1.Deployment {
	labels := map[string]string{"app": "gateway"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "gateway", Image: "registry.example/gateway:1.0",
						VolumeMounts: []corev1.VolumeMount{{Name: "apis", MountPath: "/etc/gateway/apis"}}}},
					Volumes: []corev1.Volume{{Name: "apis", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "gateway-apis"}}}}},
				},
			},
		},
	}
}

// waitRolledOut waits until the Deployment has rs ReplicaSets and every replica of the
// newest one is available.
func waitRolledOut(ctx context.Context, cs kubernetes.Interface, rs int) error {
	return wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "gateway", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		list, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gateway"})
		if err != nil {
			return false, nil
		}
		return len(list.Items) == rs && d.Status.ObservedGeneration == d.Generation &&
			d.Status.UpdatedReplicas == 2 && d.Status.AvailableReplicas == 2 && d.Status.Replicas == 2, nil
	})
}

func showReplicaSets(ctx context.Context, cs kubernetes.Interface) error {
	list, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gateway"})
	if err != nil {
		return err
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp) })
	fmt.Printf("    %-28s %-8s %-8s %-14s %s\n", "REPLICASET", "DESIRED", "READY", "CONFIG-HASH", "SOURCES")
	for _, r := range list.Items {
		a := r.Spec.Template.Annotations
		fmt.Printf("    %-28s %-8d %-8d %-14s %s\n", r.Name, ptr.Deref(r.Spec.Replicas, 0), r.Status.ReadyReplicas,
			short(a[stamp.HashAnnotation]), a[stamp.SourcesAnnotation])
		if cause := r.Annotations[stamp.ChangeCauseAnnotation]; cause != "" {
			fmt.Printf("      change-cause (kubectl rollout history): %s\n", cause)
		}
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=gateway"})
	if err != nil {
		return err
	}
	running := 0
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			running++
		}
	}
	fmt.Printf("    pods Running: %d\n", running)
	return nil
}

// printAudit copies configstamp's JSON log to a file and prints its audit lines.
func printAudit(r io.Reader, path string) {
	f, _ := os.Create(path)
	defer f.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Bytes()
		f.Write(append(line, '\n'))
		var rec map[string]any
		if json.Unmarshal(line, &rec) != nil {
			continue
		}
		switch rec["msg"] {
		case "Stamped config hash":
			if rec["dryRun"] == true {
				continue
			}
			fmt.Printf("    [configstamp audit] %s %s/%s by %v: %s -> %s (%v)\n", rec["operation"], rec["namespace"], rec["name"],
				rec["user"], short(fmt.Sprint(rec["oldHash"])), short(fmt.Sprint(rec["newHash"])), rec["sources"])
		case "Nudged Deployment after a config change":
			fmt.Printf("    [configstamp watcher] nudged %s/%s: %v\n", rec["namespace"], rec["name"], rec["reason"])
		case "Registered webhook":
			fmt.Printf("    [configstamp] registered MutatingWebhookConfiguration %v\n", rec["configuration"])
		}
	}
}

func showAPIAudit(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Verb, Stage, RequestURI string
			User                    struct{ Username string }
			ObjectRef               struct{ Namespace, Name, Resource string }
			Annotations             map[string]string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.ObjectRef.Namespace != ns || ev.ObjectRef.Resource != "deployments" ||
			strings.Contains(ev.RequestURI, "dryRun") {
			continue
		}
		h := ev.Annotations["deployments.configstamp.io/config-hash"]
		if h == "" {
			continue
		}
		fmt.Printf("    %-6s deployments/%s by %-12s deployments.configstamp.io/config-hash=%s sources=%s\n",
			ev.Verb, ev.ObjectRef.Name, ev.User.Username, short(h), ev.Annotations["deployments.configstamp.io/sources"])
	}
	return sc.Err()
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" || h == "<nil>" {
		return "-"
	}
	return h
}
