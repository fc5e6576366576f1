package stamp

import (
	"crypto/sha256"
)

// blockSize is SHA-256's block size, HMAC's pad length.
const blockSize = 64

// The HMAC-SHA256 of one source is computed here (RFC 2104) on the one SHA-256 state the
// encoder writes into, with its pad in the encoder, rather than with crypto/hmac, whose
// New allocates five objects per source: a keyed digest costs no more allocations than
// an unkeyed one did. mac_test.go checks it against crypto/hmac.

// macBegin starts HMAC-SHA256 under key: the hash is reset and given key ⊕ ipad.
func (e *encoder) macBegin(key []byte) {
	e.pad(key, 0x36)
	e.h.Reset()
	e.h.Write(e.block[:blockSize])
}

// macEnd finishes the HMAC begun by macBegin under the same key into sum.
func (e *encoder) macEnd(key []byte, sum *[sha256.Size]byte) {
	inner := e.h.Sum(sum[:0])
	e.pad(key, 0x5c)
	copy(e.block[blockSize:], inner)
	e.h.Reset()
	e.h.Write(e.block[:])
	e.h.Sum(sum[:0])
}

// pad fills the first block of e.block with key (hashed first when longer than a
// block) padded with zeroes, each byte XORed with b.
func (e *encoder) pad(key []byte, b byte) {
	p := e.block[:blockSize]
	clear(p)
	if len(key) > blockSize {
		k := sha256.Sum256(key)
		copy(p, k[:])
	} else {
		copy(p, key)
	}
	for i := range p {
		p[i] ^= b
	}
}
