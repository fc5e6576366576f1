package stamp

import (
	"reflect"
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
	for _, tt := range []struct{ before, after, want string }{
		{"configmap/a=111111111111,secret/s=222222222222", "configmap/a=333333333333,secret/s=222222222222",
			"configstamp: configmap/a changed (digest 111111111111 -> 333333333333)"},
		{"configmap/a=111111111111", "configmap/b=444444444444",
			"configstamp: configmap/b changed (digest none -> 444444444444); configmap/a changed (digest 111111111111 -> none)"},
		{"configmap/a=111111111111", "configmap/a=111111111111", "configstamp: pods restarted onto the config their stamp names"},
	} {
		got := ChangeCause(tt.before, tt.after)
		if got != tt.want {
			t.Errorf("ChangeCause(%q, %q) = %q, want %q", tt.before, tt.after, got, tt.want)
		}
		if !IsOwnChangeCause(got) {
			t.Errorf("%q not recognised as configstamp's", got)
		}
	}
	if IsOwnChangeCause("kubectl set image deployment/app app=app:2") {
		t.Error("someone else's cause taken for configstamp's")
	}
}
