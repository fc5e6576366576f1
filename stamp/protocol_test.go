package stamp

import (
	"errors"
	"strings"
	"testing"
)

func TestParseMarker(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        Marker
	}{
		{nil, Marker{}},
		{map[string]string{"other": "true"}, Marker{}},
		{map[string]string{NudgeAnnotation: NudgeValue}, Marker{Present: true, Nudge: true}},
		{map[string]string{NudgeAnnotation: "1"}, Marker{Present: true, Nudge: true}},
		{map[string]string{NudgeAnnotation: NudgeRecord}, Marker{Present: true, Record: true}},
		{map[string]string{NudgeAnnotation: ""}, Marker{Present: true}},
		{map[string]string{NudgeAnnotation: NudgeFor("0f4dd1f41f10")}, Marker{Present: true, Nudge: true, Key: "0f4dd1f41f10"}},
		// A malformed key is no key: a nudge that names none.
		{map[string]string{NudgeAnnotation: "key=../../x"}, Marker{Present: true, Nudge: true}},
		{map[string]string{NudgeAnnotation: "key=0f4dd1f41f10x"}, Marker{Present: true, Nudge: true}},
	} {
		if got := ParseMarker(tc.annotations); got != tc.want {
			t.Errorf("%v: %+v, want %+v", tc.annotations, got, tc.want)
		}
	}
}

func TestUnreadWarning(t *testing.T) {
	w := UnreadWarning("Deployment", "0123456789abcdef", errors.New("etcdserver: request timed out"))
	if want := "configstamp: could not read config; the Deployment keeps its stored config hash (0123456789ab) and configstamp re-checks it shortly: etcdserver: request timed out"; w != want {
		t.Errorf("%q, want %q", w, want)
	}
	if !IsUnreadWarning(w) || IsUnreadWarning("configstamp: not stamped: internal error") {
		t.Error("IsUnreadWarning")
	}
	if w := UnreadWarning("StatefulSet", "", errors.New("x")); !IsUnreadWarning(w) || w != "configstamp: could not read config; the StatefulSet keeps its stored config hash (none) and configstamp re-checks it shortly: x" {
		t.Errorf("unstamped: %q", w)
	}
}

// The fingerprint of docs/hash.md's example key, and a nudge that names no key.
func TestKeyFingerprint(t *testing.T) {
	if got := KeyFingerprint([]byte("0123456789abcdef0123456789abcdef")); got != "0f4dd1f41f10" {
		t.Errorf("KeyFingerprint = %q, want 0f4dd1f41f10 (docs/hash.md)", got)
	}
	if KeyFingerprint(nil) != "" || NudgeFor("") != NudgeValue || NudgeFor("0f4dd1f41f10") != "key=0f4dd1f41f10" {
		t.Error("no key: no fingerprint, and a nudge that names none")
	}
	w := OtherKeyWarning("Deployment", "0f4dd1f41f10", "aaaaaaaaaaaa")
	if !strings.HasPrefix(w, WarningOtherKey) || !strings.Contains(w, "0f4dd1f41f10") {
		t.Errorf("OtherKeyWarning = %q", w)
	}
}
