package stamp

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func csiVolume(driver, class string) corev1.Volume {
	return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
		Driver: driver, VolumeAttributes: map[string]string{CSIClassAttribute: class},
	}}}
}

func TestConsumedCSI(t *testing.T) {
	spec := &corev1.PodSpec{Volumes: []corev1.Volume{
		csiVolume(CSIDriver, "db"), csiVolume("other.csi.example.com", "x"), csiVolume(CSIDriver, ""),
	}}
	if got := Consumed(nil, spec, Options{}); len(got) != 0 {
		t.Fatalf("off: got %v, want none", got)
	}
	got := Consumed(nil, spec, Options{CSISecrets: true})
	if len(got) != 1 || got[0].ID() != "secretproviderclass/db" || !got[0].AllKeys || !got[0].Required {
		t.Fatalf("on: got %+v, want secretproviderclass/db, all keys, required", got)
	}
	// The trimmed cache keeps the volume.
	refs := ReferencesOnly(spec)
	if again := Consumed(nil, &refs, Options{CSISecrets: true}); len(again) != 1 || again[0].ID() != "secretproviderclass/db" {
		t.Fatalf("ReferencesOnly lost the csi volume: %+v", again)
	}
}
