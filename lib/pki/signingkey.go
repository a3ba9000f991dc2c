package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// # Token signing keys
//
// A token signing key (the service account issuer's) is a private key
// file and a public key file beside it. The public file holds the
// current key's public half first, then those of the keys it replaced:
// verifiers read every key in it (kube-apiserver's
// --service-account-key-file), so tokens signed before a rotation verify
// until their keys are dropped from the file. Both files are written by
// rename (a reader sees the old file or the new one); the private key
// with mode 0600.

// LoadOrCreateSigningKey makes sure keyFile holds a private key and
// pubFile holds its public key, creating an ECDSA P-256 key when keyFile
// does not exist. It reports whether it created one.
func LoadOrCreateSigningKey(keyFile, pubFile string) (created bool, err error) {
	data, err := os.ReadFile(keyFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, RotateSigningKey(keyFile, pubFile)
	case err != nil:
		return false, fmt.Errorf("pki: signing key: %w", err)
	}
	key, err := parseKeyPEM(data)
	if err != nil {
		return false, fmt.Errorf("pki: signing key %s: %w", keyFile, err)
	}
	pubs, err := readPublicKeys(pubFile)
	if err != nil {
		return false, err
	}
	for _, p := range pubs {
		if publicKeysEqual(key.Public(), p) {
			return false, nil
		}
	}
	return false, writePublicKeys(pubFile, append([]crypto.PublicKey{key.Public()}, pubs...))
}

// RotateSigningKey writes a new ECDSA P-256 private key to keyFile and
// puts its public key first in pubFile, keeping the public keys already
// there (the replaced keys'), so that what they signed still verifies.
// The public file is written first: a verifier never sees a token signed
// with a key it cannot read yet.
func RotateSigningKey(keyFile, pubFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: generate signing key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: signing key: %w", err)
	}
	pubs, err := readPublicKeys(pubFile)
	if err != nil {
		return err
	}
	if err := writePublicKeys(pubFile, append([]crypto.PublicKey{key.Public()}, pubs...)); err != nil {
		return err
	}
	return writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600)
}

// readPublicKeys reads the PEM public keys of path; none when it does not
// exist.
func readPublicKeys(path string) ([]crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pki: public keys: %w", err)
	}
	var keys []crypto.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return keys, nil
		}
		if block.Type != "PUBLIC KEY" {
			continue
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pki: public keys %s: %w", path, err)
		}
		keys = append(keys, k)
	}
}

func writePublicKeys(path string, keys []crypto.PublicKey) error {
	var out []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return fmt.Errorf("pki: public key: %w", err)
		}
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	return writeFile(path, out, 0o644)
}
