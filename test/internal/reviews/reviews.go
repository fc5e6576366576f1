// Package reviews posts AdmissionReviews straight to configstamp's webhook port, as any
// pod that can reach it could, bypassing the API server: the review as the API server
// would send it, an HTTPS client trusting the dev registration's CA, and the answer read
// back with the template annotations its patch sets.
package reviews

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/webhook"
)

// Deployment is a CREATE AdmissionReview of the Deployment obj (JSON) as the API server
// sends it, claiming request namespace ns, whatever obj's own namespace says.
func Deployment(uid, ns, name string, obj []byte) []byte {
	r := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       types.UID("forged-" + uidSafe(uid)),
			Kind:      metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:  metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Operation: admissionv1.Create, Namespace: ns, Name: name,
			Object: runtime.RawExtension{Raw: obj},
		},
	}
	b, _ := json.Marshal(r)
	return b
}

func uidSafe(s string) string { return strings.NewReplacer(" ", "-", "/", "-").Replace(s) }

// Client is an HTTPS client of the webhook port that trusts the CA the dev registration
// gives the API server (webhook.DevConfigurationName), with the given timeout.
func Client(ctx context.Context, c client.Client, timeout time.Duration) (*http.Client, error) {
	var reg admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, client.ObjectKey{Name: webhook.DevConfigurationName}, &reg); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if len(reg.Webhooks) == 0 || !pool.AppendCertsFromPEM(reg.Webhooks[0].ClientConfig.CABundle) {
		return nil, errors.New("no CA in the dev registration")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 64}
	return &http.Client{Timeout: timeout, Transport: tr}, nil
}

// URL is the Deployments' webhook path on the port.
func URL(port int) string { return fmt.Sprintf("https://127.0.0.1:%d%s", port, webhook.Path) }

// Answer is what came back for one posted review.
type Answer struct {
	// Err is a failure to get any HTTP answer (refused, reset, the client's timeout).
	Err error
	// Code is the HTTP status; Review the decoded answer (nil if it did not decode).
	Code   int
	Review *admissionv1.AdmissionReview
	Body   []byte
	Took   time.Duration
}

// Post posts body to url and reads the answer.
func Post(hc *http.Client, url string, body []byte) Answer {
	start := time.Now()
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return Answer{Err: err, Took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	a := Answer{Err: err, Code: resp.StatusCode, Body: b, Took: time.Since(start)}
	var out admissionv1.AdmissionReview
	if err == nil && json.Unmarshal(b, &out) == nil && out.Response != nil {
		a.Review = &out
	}
	return a
}

// Response is the answer's AdmissionResponse (nil when there is none).
func (a Answer) Response() *admissionv1.AdmissionResponse {
	if a.Review == nil {
		return nil
	}
	return a.Review.Response
}

// AllowedUntouched says why the answer is not an AdmissionReview that allows the object
// without a patch, nil when it is.
func (a Answer) AllowedUntouched() error {
	r := a.Response()
	switch {
	case a.Err != nil:
		return fmt.Errorf("no answer: %w", a.Err)
	case a.Code != http.StatusOK || r == nil:
		return fmt.Errorf("HTTP %d, not an answered review: %.300s", a.Code, a.Body)
	case !r.Allowed:
		return fmt.Errorf("not allowed: %.300s", a.Body)
	case len(r.Patch) > 0:
		return fmt.Errorf("patched: %.300s", r.Patch)
	}
	return nil
}

// TemplateAnnotations are the pod-template annotations the answer's patch adds or
// replaces under /spec/template/metadata, for an object that had none there (what a
// forged review's object carries): the stamp it gives.
func (a Answer) TemplateAnnotations() (map[string]string, error) {
	r := a.Response()
	if r == nil {
		return nil, fmt.Errorf("no review in the answer: %.300s", a.Body)
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	}
	if len(r.Patch) > 0 {
		if err := json.Unmarshal(r.Patch, &ops); err != nil {
			return nil, fmt.Errorf("patch: %w", err)
		}
	}
	const base = "/spec/template/metadata"
	out := map[string]string{}
	for _, op := range ops {
		if (op.Op != "add" && op.Op != "replace") || !strings.HasPrefix(op.Path, base) {
			continue
		}
		var err error
		switch rest := strings.TrimPrefix(op.Path, base); {
		case rest == "":
			var m struct{ Annotations map[string]string }
			err = json.Unmarshal(op.Value, &m)
			for k, v := range m.Annotations {
				out[k] = v
			}
		case rest == "/annotations":
			var m map[string]string
			err = json.Unmarshal(op.Value, &m)
			for k, v := range m {
				out[k] = v
			}
		case strings.HasPrefix(rest, "/annotations/"):
			var v string
			err = json.Unmarshal(op.Value, &v)
			key := strings.NewReplacer("~1", "/", "~0", "~").Replace(strings.TrimPrefix(rest, "/annotations/"))
			out[key] = v
		}
		if err != nil {
			return nil, fmt.Errorf("patch op %s %s: %w", op.Op, op.Path, err)
		}
	}
	return out, nil
}
