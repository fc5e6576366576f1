package integration

import (
	"crypto/tls"
	"fmt"
	"testing"

	"github.com/configstamp/configstamp/test/framework"
)

// testWebhookTLS: the webhook server offers HTTP/1.1 only (no HTTP/2 unless
// --enable-http2) and no TLS below 1.2.
func testWebhookTLS(t *testing.T, cs *framework.Configstamp) {
	addr := fmt.Sprintf("127.0.0.1:%d", cs.WebhookPort)
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // only the handshake is checked
	if err != nil {
		t.Fatal(err)
	}
	if p := conn.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("negotiated %q, want http/1.1", p)
	}
	conn.Close()
	if conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}); err == nil { //nolint:gosec // a handshake that must fail
		conn.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
}
