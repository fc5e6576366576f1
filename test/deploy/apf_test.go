package deploy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// TestRenderFlowControl: by default the chart renders configstamp's priority level and the
// FlowSchema that sends its ServiceAccounts (the watcher's and the webhook's, no other)
// there, flows told apart by user;
// flowControl.enabled=false renders neither.
func TestRenderFlowControl(t *testing.T) {
	objs := render(t)
	pl := typed[flowcontrolv1.PriorityLevelConfiguration](t, objs, "PriorityLevelConfiguration/configstamp")
	if l := pl.Spec.Limited; pl.Spec.Type != flowcontrolv1.PriorityLevelEnablementLimited || l == nil ||
		l.LimitResponse.Type != flowcontrolv1.LimitResponseTypeQueue || l.LimitResponse.Queuing == nil {
		t.Errorf("priority level %+v: want Limited, queuing", pl.Spec)
	}
	fs := typed[flowcontrolv1.FlowSchema](t, objs, "FlowSchema/configstamp")
	if fs.Spec.PriorityLevelConfiguration.Name != pl.Name || fs.Spec.DistinguisherMethod == nil ||
		fs.Spec.DistinguisherMethod.Type != flowcontrolv1.FlowDistinguisherMethodByUserType {
		t.Errorf("flow schema %+v: want level %s, ByUser", fs.Spec, pl.Name)
	}
	var subjects []flowcontrolv1.ServiceAccountSubject
	for _, r := range fs.Spec.Rules {
		for _, sub := range r.Subjects {
			if sub.Kind != flowcontrolv1.SubjectKindServiceAccount || sub.ServiceAccount == nil {
				t.Errorf("flow schema subject %+v: want ServiceAccounts only", sub)
				continue
			}
			subjects = append(subjects, *sub.ServiceAccount)
		}
	}
	if want := []flowcontrolv1.ServiceAccountSubject{{Namespace: releaseNS, Name: "configstamp"}, {Namespace: releaseNS, Name: "configstamp-webhook"}}; !slices.Equal(subjects, want) {
		t.Errorf("flow schema matches %+v: want configstamp's ServiceAccounts %+v only", subjects, want)
	}
	for key := range render(t, "--set", "flowControl.enabled=false") {
		if strings.HasPrefix(key, "FlowSchema/") || strings.HasPrefix(key, "PriorityLevelConfiguration/") {
			t.Errorf("flowControl.enabled=false renders %s", key)
		}
	}
}

// TestChartClassifiesConfigstampIntoItsLevel installs the chart with the real helm: the
// API server accepts its FlowSchema (not dangling: its level exists), ranks it after
// every built-in schema but the catch-alls for ServiceAccounts and everyone, and
// classifies a request made with a token of either of configstamp's ServiceAccounts into
// configstamp's level (the X-Kubernetes-PF-* response headers), while another
// ServiceAccount of the same namespace stays where it was.
func TestChartClassifiesConfigstampIntoItsLevel(t *testing.T) {
	installChart(t)
	ctx := context.Background()
	var fs flowcontrolv1.FlowSchema
	var pl flowcontrolv1.PriorityLevelConfiguration
	framework.Eventually(t, time.Minute, "the API server takes configstamp's FlowSchema", func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "configstamp"}, &pl); err != nil {
			return err
		}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "configstamp"}, &fs); err != nil {
			return err
		}
		for _, c := range fs.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling && c.Status == flowcontrolv1.ConditionFalse {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v, want Dangling False", fs.Status.Conditions)
	})

	var all flowcontrolv1.FlowSchemaList
	if err := env.Client.List(ctx, &all); err != nil {
		t.Fatal(err)
	}
	builtIn := 0
	for _, s := range all.Items {
		if s.Annotations[flowcontrolv1.AutoUpdateAnnotationKey] == "" {
			continue
		}
		builtIn++
		after := s.Name == "service-accounts" || s.Name == "global-default" || s.Name == "catch-all"
		if before := s.Spec.MatchingPrecedence < fs.Spec.MatchingPrecedence; before == after {
			want := map[bool]string{false: "after", true: "before"}[after]
			t.Errorf("built-in FlowSchema %s has precedence %d, configstamp's %d: want configstamp's %s it",
				s.Name, s.Spec.MatchingPrecedence, fs.Spec.MatchingPrecedence, want)
		}
	}
	if builtIn < 5 {
		t.Fatalf("only %d built-in FlowSchemas: is priority and fairness on?", builtIn)
	}

	tool(t, "kubectl", "--namespace", releaseNS, "create", "serviceaccount", "apf-other")
	t.Cleanup(func() { _, _ = toolErr("kubectl", "--namespace", releaseNS, "delete", "serviceaccount", "apf-other") })
	for _, sa := range []string{"configstamp", "configstamp-webhook"} {
		framework.Eventually(t, time.Minute, sa+"'s requests classified into configstamp's level", func() error {
			schema, level, err := classified(t, sa)
			if err != nil {
				return err
			}
			if schema != fs.UID || level != pl.UID {
				return fmt.Errorf("flow schema %s, priority level %s; configstamp's are %s, %s", schema, level, fs.UID, pl.UID)
			}
			return nil
		})
	}
	schema, level, err := classified(t, "apf-other")
	if err != nil {
		t.Fatal(err)
	}
	if schema == fs.UID || level == pl.UID || schema == "" {
		t.Errorf("another ServiceAccount of %s: flow schema %q, priority level %q, want not configstamp's", releaseNS, schema, level)
	}
}

// classified makes a request with a token of the ServiceAccount releaseNS/name and
// returns the UIDs of the FlowSchema and priority level the API server put it in.
func classified(t *testing.T, name string) (schema, level types.UID, err error) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.ServiceAccountKubeconfig(t, releaseNS, name))
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(cfg.Host + "/api/v1/namespaces/" + releaseNS + "/configmaps?limit=1")
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		return "", "", fmt.Errorf("status %s", resp.Status)
	}
	return types.UID(resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID)),
		types.UID(resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)), nil
}
