package stamp

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
)

// The hand-rolled HMAC equals crypto/hmac for keys shorter than, as long as, and longer
// than a block, and for messages of every interesting length.
func TestMACMatchesCryptoHMAC(t *testing.T) {
	for _, keyLen := range []int{1, 31, 32, 63, 64, 65, 200} {
		key := bytes.Repeat([]byte{byte(keyLen)}, keyLen)
		for _, msgLen := range []int{0, 1, 55, 64, 1000} {
			msg := bytes.Repeat([]byte("m"), msgLen)
			e := encoder{h: sha256.New()}
			e.macBegin(key)
			e.h.Write(msg)
			var got [sha256.Size]byte
			e.macEnd(key, &got)
			want := hmac.New(sha256.New, key)
			want.Write(msg)
			if !bytes.Equal(got[:], want.Sum(nil)) {
				t.Fatalf("key %d bytes, message %d bytes: %x, want %x", keyLen, msgLen, got, want.Sum(nil))
			}
		}
	}
}
