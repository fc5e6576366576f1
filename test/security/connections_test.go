package security

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// connectAndClose is how many connections testConnectAndClose opens and closes.
const connectAndClose = 200

// testConnectAndClose: a port scanner's connections to the webhook port, each closed
// before a TLS handshake, make net/http log a line apiece; configstamp lets a handful
// through (then one a minute), so a scanner cannot fill its log; it still answers.
func (s *suite) testConnectAndClose(t *testing.T) {
	mark := s.logMark()
	addr := fmt.Sprintf("127.0.0.1:%d", s.cs.WebhookPort)
	for range connectAndClose {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// Close our side and wait for the server to close its own: it has logged the
		// failed handshake by then.
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		_ = c.Close()
	}
	out := s.settle(t, mark) // a review in scope answered and logged after them
	lines := strings.Count(out, "TLS handshake error")
	t.Logf("%d connections closed before a handshake: %d log lines about them", connectAndClose, lines)
	if lines == 0 || lines > 5 {
		t.Errorf("%d connections closed before a handshake gave %d log lines, want a handful (1-5)", connectAndClose, lines)
	}
}
