package stamp

import (
	"reflect"
	"strings"
	"testing"
)

func TestChangedSources(t *testing.T) {
	tests := []struct {
		before, after string
		want          []string
	}{
		{"", "configmap/a=111111111111", []string{"configmap/a"}},
		{"configmap/a=111111111111", "configmap/a=111111111111", nil},
		{"configmap/a=111111111111,configmap/b=222222222222", "configmap/a=111111111111,configmap/b=333333333333", []string{"configmap/b"}},
		{"configmap/a=111111111111", "configmap/a=111111111111,configmap/new=missing", []string{"configmap/new"}},
		{"configmap/a=111111111111,configmap/gone=222222222222", "configmap/a=111111111111", []string{"configmap/gone"}},
	}
	for _, tt := range tests {
		if got := ChangedSources(tt.before, tt.after); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ChangedSources(%q, %q) = %v, want %v", tt.before, tt.after, got, tt.want)
		}
	}
}

func TestChangeCause(t *testing.T) {
	const (
		h1 = "1111111111110000000000000000000000000000000000000000000000000000"
		h2 = "2222222222220000000000000000000000000000000000000000000000000000"
		h3 = "3333333333330000000000000000000000000000000000000000000000000000"
	)
	for _, tt := range []struct {
		name string
		r    Rollout
		want string
	}{
		{"one source changed", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111,secret/s=222222222222", Hash: h2, Sources: "configmap/a=333333333333,secret/s=222222222222"},
			"configstamp: configmap/a changed (digest 111111111111 -> 333333333333; keys: unknown)"},
		{"one source replaced by another", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111", Hash: h2, Sources: "configmap/b=444444444444"},
			"configstamp: configmap/b newly counted (digest 444444444444); configmap/a no longer counted (digest was 111111111111)"},
		{"a Secret counted since Secrets were turned on", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111", Hash: h2, Sources: "configmap/a=333333333333,secret/s=222222222222"},
			"configstamp: configmap/a changed (digest 111111111111 -> 333333333333; keys: unknown); secret/s newly counted (digest 222222222222)"},
		{"a source gone missing", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111", Hash: h2, Sources: "configmap/a=missing"},
			"configstamp: configmap/a changed (digest 111111111111 -> missing; keys: unknown)"},
		{"first stamp", Rollout{Hash: h2, Sources: "configmap/a=111111111111,secret/s=222222222222"},
			"configstamp: first stamp (configmap/a 111111111111, secret/s 222222222222)"},
		{"a stamp without its sources", Rollout{StoredHash: h1, Hash: h2, Sources: "configmap/a=111111111111"},
			"configstamp: config changed (config hash 111111111111 -> 222222222222)"},
		{"the record agrees with the stamp: per source", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111", Hash: h2, Sources: "configmap/a=333333333333", Ran: h1},
			"configstamp: configmap/a changed (digest 111111111111 -> 333333333333; keys: unknown)"},
		{"the pods ran other config than the stamp names", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111", Hash: h2, Sources: "configmap/a=333333333333", Ran: h3},
			"configstamp: config changed (config hash 333333333333 -> 222222222222)"},
		{"adopted with a record, first stamp", Rollout{Hash: h2, Sources: "configmap/a=111111111111", Ran: h3},
			"configstamp: config changed (config hash 333333333333 -> 222222222222); first stamp (configmap/a 111111111111)"},
		{"restart", Rollout{StoredHash: h1, StoredSources: "configmap/a=111111111111", Hash: h1, Sources: "configmap/a=111111111111", Ran: h3, Restart: true},
			"configstamp: pods restarted onto the config their stamp names (config hash 333333333333 -> 111111111111)"},
		{"many changed: three named", Rollout{StoredHash: h1, StoredSources: "configmap/a=1,configmap/b=1,configmap/c=1,configmap/d=1,configmap/e=1", Hash: h2,
			Sources: "configmap/a=2,configmap/b=2,configmap/c=2,configmap/d=2,configmap/e=2"},
			"configstamp: configmap/a changed (digest 1 -> 2; keys: unknown); configmap/b changed (digest 1 -> 2; keys: unknown); configmap/c changed (digest 1 -> 2; keys: unknown); and 2 more"},
		{"many first stamped: three named", Rollout{Hash: h2, Sources: "configmap/a=1,configmap/b=1,configmap/c=1,configmap/d=1"},
			"configstamp: first stamp (configmap/a 1, configmap/b 1, configmap/c 1, and 1 more)"},
	} {
		got := ChangeCause(tt.r)
		if got != tt.want {
			t.Errorf("%s: ChangeCause(%+v) =\n%q, want\n%q", tt.name, tt.r, got, tt.want)
		}
		if !IsOwnChangeCause(got) {
			t.Errorf("%q not recognised as configstamp's", got)
		}
		if reason := ChangeReason(tt.r); causePrefix+reason != got {
			t.Errorf("%s: ChangeReason = %q, not the cause %q without its prefix", tt.name, reason, got)
		}
	}
	if IsOwnChangeCause("kubectl set image deployment/app app=app:2") {
		t.Error("someone else's cause taken for configstamp's")
	}
}

// However long the sources' names, a change cause stays within MaxChangeCause bytes.
func TestChangeCauseBytes(t *testing.T) {
	long := func(n, d string) string { return "configmap/" + strings.Repeat(n, 253) + "=" + d }
	var before, after []string
	for _, n := range []string{"a", "b", "c", "d"} {
		before, after = append(before, long(n, "111111111111")), append(after, long(n, "222222222222"))
	}
	for _, r := range []Rollout{
		{StoredHash: "1", StoredSources: strings.Join(before, ","), Hash: "2", Sources: strings.Join(after, ",")},
		{Hash: "2", Sources: strings.Join(after, ",")},
		{Hash: "2", Sources: strings.Join(after, ","), Ran: "3"},
	} {
		if got := ChangeCause(r); len(got) > MaxChangeCause || !strings.HasSuffix(got, "and 1 more") && !strings.HasSuffix(got, "and 1 more)") {
			t.Errorf("%d bytes: %q", len(got), got)
		}
		if got := ChangeReason(r); causePrefix+got != ChangeCause(r) {
			t.Errorf("ChangeReason %q, not the cause without its prefix", got)
		}
	}
	// Cut, the reason is the cut cause without its prefix.
	name := strings.Repeat("n", 1100)
	r := Rollout{StoredHash: "1", StoredSources: "configmap/" + name + "=1", Hash: "2", Sources: "configmap/" + name + "=2"}
	if cause, reason := ChangeCause(r), ChangeReason(r); len(cause) != MaxChangeCause || causePrefix+reason != cause || !strings.HasSuffix(reason, "n...") {
		t.Errorf("cut: cause %d bytes, reason %d bytes (%q...)", len(cause), len(reason), reason[:20])
	}
	// A cut cause still names its wave.
	r.Wave = "wave 2 of 4 for configmap/shared"
	if cause := ChangeCause(r); len(cause) > MaxChangeCause || !strings.HasSuffix(cause, "n... (wave 2 of 4 for configmap/shared)") {
		t.Errorf("cut with a wave: %d bytes, ends %q", len(cause), cause[len(cause)-60:])
	}
	if got := capBytes(strings.Repeat("x", 2000), MaxChangeCause); len(got) != MaxChangeCause || !strings.HasSuffix(got, "x...") {
		t.Errorf("cut to %d bytes: %q", len(got), got)
	}
	if got := capBytes("aébbbb", 5); got != "a..." {
		t.Errorf("cut inside a rune: %q", got)
	}
}
