package deploy

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestRenderNotifications: off by default; with notifications.urlSecret.name, the
// watcher alone (the webhook role never) mounts that Secret's key, optionally, and reads
// the URL from the file, with the format, source and window of the values.
func TestRenderNotifications(t *testing.T) {
	if f := flagsOf(t, render(t), "Deployment/configstamp-watcher"); f["--notify-url-file"] != "" || f["--notify-format"] != "" {
		t.Errorf("notifications on by default: %v", f)
	}
	set := []string{"--set", "notifications.urlSecret.name=hook", "--set", "notifications.urlSecret.key=slack-url", "--set", "notifications.format=slack",
		"--set", "notifications.source=prod-eu", "--set", "notifications.batchWindow=10s"}
	objs := render(t, set...)
	w, hook := flagsOf(t, objs, "Deployment/configstamp-watcher"), processFlags(t, objs)
	if w["--notify-url-file"] != "/notify/slack-url" || w["--notify-format"] != "slack" || w["--notify-source"] != "prod-eu" || w["--notify-batch-window"] != "10s" {
		t.Errorf("watcher flags %v", w)
	}
	if hook["--notify-url-file"] != "" {
		t.Errorf("the webhook role notifies: %v", hook)
	}
	dep := typed[appsv1.Deployment](t, objs, "Deployment/configstamp-watcher")
	spec := dep.Spec.Template.Spec
	if len(spec.Volumes) != 1 || spec.Volumes[0].Secret == nil || spec.Volumes[0].Secret.SecretName != "hook" ||
		len(spec.Volumes[0].Secret.Items) != 1 || spec.Volumes[0].Secret.Items[0].Key != "slack-url" {
		t.Fatalf("watcher volumes %+v", spec.Volumes)
	}
	// A missing Secret or key (the kubelet would not start the pod) must not stop the
	// watcher: the volume is optional.
	if o := spec.Volumes[0].Secret.Optional; o == nil || !*o {
		t.Errorf("the URL Secret's volume is not optional: the watcher would not start without it")
	}
	if m := spec.Containers[0].VolumeMounts; len(m) != 1 || m[0].MountPath != "/notify" || !m[0].ReadOnly {
		t.Fatalf("watcher mounts %+v", m)
	}
	single := processFlags(t, render(t, append(set, "--set", "roles.split=false")...))
	if single["--notify-url-file"] != "/notify/slack-url" {
		t.Errorf("roles.split=false: %v", single)
	}
	if out, err := toolErr("helm", "template", "configstamp", chart, "--namespace", releaseNS, "--set", "notifications.format=email"); err == nil {
		t.Errorf("notifications.format=email accepted:\n%s", out)
	}
}
