package apf

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"sync/atomic"
)

// uidNamespace is the UUIDv5 namespace of the configuration objects' UIDs:
// UUIDv5(URL namespace, "https://meridian-cp.io/flowcontrol").
var uidNamespace = uuid5([16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}, "https://meridian-cp.io/flowcontrol")

// ObjectUID returns the stable UID of a configuration object, a UUIDv5 of
// its kind and name, so every replica and restart reports the same UIDs.
// kind is "flowschemas" or "prioritylevelconfigurations".
func ObjectUID(kind, name string) string {
	return format(uuid5(uidNamespace, kind+"/"+name))
}

func uuid5(ns [16]byte, name string) [16]byte {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	return u
}

// grantIDs makes grant IDs: random (version 4) UUIDs without a read of
// the system's random source per grant. Each ID is a counter encrypted
// with AES under a key drawn once, so the IDs of one source never repeat
// and, without the key, look random and cannot be guessed from one
// another; sources of different Controllers (replicas, terms) draw their
// own keys, so their IDs collide no more than random UUIDs do (Adopt
// keeps a previous leader's IDs beside this one's).
type grantIDs struct {
	block cipher.Block
	next  atomic.Uint64
}

// newGrantIDs returns a source of grant IDs with a fresh random key.
func newGrantIDs() (*grantIDs, error) {
	var key [16]byte
	_, _ = rand.Read(key[:]) // never fails (crypto/rand documents this)
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("grant ids: %w", err)
	}
	return &grantIDs{block: block}, nil
}

// newID returns the next grant ID.
func (g *grantIDs) newID() string {
	var u [16]byte
	binary.LittleEndian.PutUint64(u[:8], g.next.Add(1))
	g.block.Encrypt(u[:], u[:])
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	return format(u)
}

// format writes u in the canonical 8-4-4-4-12 hex form.
func format(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:16])
	return string(b[:])
}
