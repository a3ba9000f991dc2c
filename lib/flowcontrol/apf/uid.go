package apf

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
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

// newGrantID returns a random (version 4) UUID.
func newGrantID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // never fails (crypto/rand documents this)
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
