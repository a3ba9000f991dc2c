package storagecrypt

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"golang.org/x/crypto/nacl/secretbox"
)

// Provider prefixes: the first bytes of every value a provider writes.
const (
	aescbcPrefix    = "k8s:enc:aescbc:v1:"
	aesgcmPrefix    = "k8s:enc:aesgcm:v1:"
	secretboxPrefix = "k8s:enc:secretbox:v1:"
	kmsPrefix       = "k8s:enc:kms:v2:"
	// encryptedMark starts every encrypted value.
	encryptedMark = "k8s:enc:"
)

// provider encrypts and decrypts values for one entry of a provider list.
// Implementations are safe for concurrent use.
type provider interface {
	// prefix is what starts every value the provider writes ("" for
	// identity).
	prefix() string
	// encrypt returns the stored value of plain under store key key,
	// prefix included.
	encrypt(ctx context.Context, key string, plain []byte) ([]byte, error)
	// decrypt returns the value stored under key as data (what follows
	// the prefix), and whether it was written with anything but the
	// provider's current key.
	decrypt(ctx context.Context, key string, data []byte) (plain []byte, stale bool, err error)
}

// keyCipher is one named key's cipher.
type keyCipher interface {
	// seal appends the encryption of plain (with aad authenticated, where
	// the cipher authenticates anything) to dst.
	seal(dst, plain, aad []byte) ([]byte, error)
	// open decrypts data.
	open(data, aad []byte) ([]byte, error)
	// overhead is how much longer sealing makes a value, at most.
	overhead() int
}

// namedKey is a key and its name.
type namedKey struct {
	name   string
	cipher keyCipher
}

// keyed is a provider of named keys (aescbc, aesgcm, secretbox): the
// first key encrypts, and each value names its key after the provider's
// prefix.
type keyed struct {
	kind, pfx string
	keys      []namedKey
}

var _ provider = (*keyed)(nil)

// newKeyed builds a keyed provider from keys, making each cipher with
// newCipher from the decoded secret.
func newKeyed(kind, pfx string, keys []Key, newCipher func([]byte) (keyCipher, error)) (*keyed, error) {
	p := &keyed{kind: kind, pfx: pfx}
	for _, k := range keys {
		secret, err := base64.StdEncoding.DecodeString(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("%s key %q: %w", kind, k.Name, err)
		}
		c, err := newCipher(secret)
		if err != nil {
			return nil, fmt.Errorf("%s key %q: %w", kind, k.Name, err)
		}
		p.keys = append(p.keys, namedKey{name: k.Name, cipher: c})
	}
	if len(p.keys) == 0 {
		return nil, fmt.Errorf("%s has no keys", kind)
	}
	return p, nil
}

func (p *keyed) prefix() string { return p.pfx }

func (p *keyed) encrypt(_ context.Context, key string, plain []byte) ([]byte, error) {
	k := p.keys[0]
	out := make([]byte, 0, len(p.pfx)+len(k.name)+1+k.cipher.overhead()+len(plain))
	out = append(append(append(out, p.pfx...), k.name...), ':')
	return k.cipher.seal(out, plain, []byte(key))
}

func (p *keyed) decrypt(_ context.Context, key string, data []byte) ([]byte, bool, error) {
	for i, k := range p.keys {
		if len(data) <= len(k.name) || data[len(k.name)] != ':' || string(data[:len(k.name)]) != k.name {
			continue
		}
		plain, err := k.cipher.open(data[len(k.name)+1:], []byte(key))
		if err != nil {
			return nil, false, fmt.Errorf("%s key %q: %w", p.kind, k.name, err)
		}
		return plain, i != 0, nil
	}
	name, _, _ := bytes.Cut(data, []byte(":"))
	return nil, false, fmt.Errorf("no %s key is named %q", p.kind, printable(name, 64))
}

// aesCBC is AES in CBC mode with PKCS#7 padding and a random IV; it
// authenticates nothing.
type aesCBC struct{ block cipher.Block }

func newAESCBC(secret []byte) (keyCipher, error) {
	b, err := aes.NewCipher(secret)
	if err != nil {
		return nil, err
	}
	return aesCBC{block: b}, nil
}

func (c aesCBC) overhead() int { return 2 * aes.BlockSize }

func (c aesCBC) seal(dst, plain, _ []byte) ([]byte, error) {
	pad := aes.BlockSize - len(plain)%aes.BlockSize
	start := len(dst)
	dst = append(dst, make([]byte, aes.BlockSize)...)
	if _, err := rand.Read(dst[start:]); err != nil {
		return nil, fmt.Errorf("aescbc: random IV: %w", err)
	}
	dst = append(dst, plain...)
	dst = append(dst, bytes.Repeat([]byte{byte(pad)}, pad)...)
	body := dst[start+aes.BlockSize:]
	cipher.NewCBCEncrypter(c.block, dst[start:start+aes.BlockSize]).CryptBlocks(body, body)
	return dst, nil
}

// Errors of a value that is not what AES-CBC wrote with this key.
var (
	errShort       = errors.New("the stored data was shorter than the required size")
	errBlockSize   = errors.New("the stored data is not a multiple of the block size")
	errBadPadding  = errors.New("invalid padding on input")
	errNotPadded   = errors.New("invalid PKCS7 data (empty or not padded)")
	errKeyMismatch = errors.New("the value was not written with this key")
)

func (c aesCBC) open(data, _ []byte) ([]byte, error) {
	if len(data) < 2*aes.BlockSize {
		return nil, errShort
	}
	iv, body := data[:aes.BlockSize], data[aes.BlockSize:]
	if len(body)%aes.BlockSize != 0 {
		return nil, errBlockSize
	}
	out := make([]byte, len(body))
	cipher.NewCBCDecrypter(c.block, iv).CryptBlocks(out, body)
	pad := int(out[len(out)-1])
	if pad == 0 || pad > aes.BlockSize {
		return nil, errNotPadded
	}
	for _, b := range out[len(out)-pad:] {
		if int(b) != pad {
			return nil, errBadPadding
		}
	}
	return out[:len(out)-pad], nil
}

// aesGCM is AES-GCM with a random 12-byte nonce before the sealed value;
// it authenticates the store key.
type aesGCM struct{ aead cipher.AEAD }

func newAESGCM(secret []byte) (keyCipher, error) {
	b, err := aes.NewCipher(secret)
	if err != nil {
		return nil, err
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return nil, err
	}
	return aesGCM{aead: a}, nil
}

func (c aesGCM) overhead() int { return c.aead.NonceSize() + c.aead.Overhead() }

func (c aesGCM) seal(dst, plain, aad []byte) ([]byte, error) {
	n := c.aead.NonceSize()
	start := len(dst)
	dst = append(dst, make([]byte, n)...)
	if _, err := rand.Read(dst[start:]); err != nil {
		return nil, fmt.Errorf("aesgcm: random nonce: %w", err)
	}
	return c.aead.Seal(dst, dst[start:start+n], plain, aad), nil
}

func (c aesGCM) open(data, aad []byte) ([]byte, error) {
	n := c.aead.NonceSize()
	if len(data) < n+c.aead.Overhead() {
		return nil, errShort
	}
	return c.aead.Open(nil, data[:n], data[n:], aad)
}

// secretBox is NaCl's secretbox (XSalsa20-Poly1305) with a random
// 24-byte nonce before the sealed value; it authenticates nothing but
// the value.
type secretBox struct{ key [32]byte }

func newSecretbox(secret []byte) (keyCipher, error) {
	if len(secret) != 32 {
		return nil, fmt.Errorf("secretbox keys are 32 bytes, got %d", len(secret))
	}
	var c secretBox
	copy(c.key[:], secret)
	return c, nil
}

const secretboxNonceSize = 24

func (c secretBox) overhead() int { return secretboxNonceSize + secretbox.Overhead }

func (c secretBox) seal(dst, plain, _ []byte) ([]byte, error) {
	var nonce [secretboxNonceSize]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, fmt.Errorf("secretbox: random nonce: %w", err)
	}
	return secretbox.Seal(append(dst, nonce[:]...), plain, &nonce, &c.key), nil
}

func (c secretBox) open(data, _ []byte) ([]byte, error) {
	if len(data) < secretboxNonceSize+secretbox.Overhead {
		return nil, errShort
	}
	var nonce [secretboxNonceSize]byte
	copy(nonce[:], data)
	out, ok := secretbox.Open(nil, data[secretboxNonceSize:], &nonce, &c.key)
	if !ok {
		return nil, errKeyMismatch
	}
	return out, nil
}

// identity stores values as they are. Reading a value that starts with
// "k8s:enc:" is an error: it was encrypted, and decoding it as an object
// would only give a confusing error later.
type identity struct{}

var _ provider = identity{}

func (identity) prefix() string { return "" }

func (identity) encrypt(_ context.Context, _ string, plain []byte) ([]byte, error) {
	return plain, nil
}

// errIdentityEncrypted is identity's error for an encrypted value.
var errIdentityEncrypted = errors.New("identity transformer tried to read encrypted data")

func (identity) decrypt(_ context.Context, _ string, data []byte) ([]byte, bool, error) {
	if bytes.HasPrefix(data, []byte(encryptedMark)) {
		return nil, false, errIdentityEncrypted
	}
	return data, false, nil
}

// printable returns b, at most n bytes of it, with anything but printable
// ASCII replaced, for an error message.
func printable(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	out := make([]byte, len(b))
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			c = '?'
		}
		out[i] = c
	}
	return string(out)
}
