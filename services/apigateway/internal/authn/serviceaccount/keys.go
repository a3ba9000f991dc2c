package serviceaccount

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	jose "github.com/go-jose/go-jose/v4"
)

// KeyID is the "kid" of a public key, derived as kube-apiserver derives
// it: the unpadded base64url encoding of the SHA-256 of the key's PKIX
// DER encoding. A verifier that holds several keys picks the one a
// token's header names.
func KeyID(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("serviceaccount: key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return base64.RawURLEncoding.EncodeToString(sum[:]), nil
}

// algorithm is the JWS algorithm a key signs with, as kube-apiserver
// chooses it: RS256 for RSA, ES256/384/512 for ECDSA by curve.
func algorithm(pub crypto.PublicKey) (jose.SignatureAlgorithm, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", fmt.Errorf("serviceaccount: an RSA key of %d bits is too short: use 2048 or more", k.N.BitLen())
		}
		return jose.RS256, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
		return "", errors.New("serviceaccount: an ECDSA key must be on P-256, P-384 or P-521")
	}
	return "", fmt.Errorf("serviceaccount: keys of type %T are not supported: use RSA or ECDSA", pub)
}

// LoadPrivateKey reads the PEM private key of path (PKCS#1, SEC 1 or
// PKCS#8; RSA or ECDSA): kube-apiserver's
// --service-account-signing-key-file.
func LoadPrivateKey(path string) (crypto.Signer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: signing key: %w", err)
	}
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("serviceaccount: signing key %s: no PEM private key", path)
		}
		if key, ok := parsePrivateKey(block); ok {
			if _, err := algorithm(key.Public()); err != nil {
				return nil, fmt.Errorf("%w (%s)", err, path)
			}
			return key, nil
		}
	}
}

// parsePrivateKey reads one PEM block as a private key; ok is false for a
// block that holds none.
func parsePrivateKey(block *pem.Block) (crypto.Signer, bool) {
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		return k, err == nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(block.Bytes)
		return k, err == nil
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, false
		}
		s, ok := k.(crypto.Signer)
		return s, ok
	}
	return nil, false
}

// LoadPublicKeys reads every public key of the PEM file path, as
// kube-apiserver reads --service-account-key-file: public keys, private
// keys (their public halves) and certificates (their keys).
func LoadPublicKeys(path string) ([]crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: key file: %w", err)
	}
	var keys []crypto.PublicKey
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		var pub crypto.PublicKey
		switch block.Type {
		case "PUBLIC KEY":
			if pub, err = x509.ParsePKIXPublicKey(block.Bytes); err != nil {
				return nil, fmt.Errorf("serviceaccount: key file %s: %w", path, err)
			}
		case "RSA PUBLIC KEY":
			if pub, err = x509.ParsePKCS1PublicKey(block.Bytes); err != nil {
				return nil, fmt.Errorf("serviceaccount: key file %s: %w", path, err)
			}
		case "CERTIFICATE":
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("serviceaccount: key file %s: %w", path, err)
			}
			pub = cert.PublicKey
		default:
			key, ok := parsePrivateKey(block)
			if !ok {
				continue
			}
			pub = key.Public()
		}
		if _, err := algorithm(pub); err != nil {
			return nil, fmt.Errorf("%w (%s)", err, path)
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("serviceaccount: key file %s holds no public key", path)
	}
	return keys, nil
}

// verificationKey is a public key that verifies tokens.
type verificationKey struct {
	id  string
	alg jose.SignatureAlgorithm
	key crypto.PublicKey
}

func newVerificationKey(pub crypto.PublicKey) (verificationKey, error) {
	id, err := KeyID(pub)
	if err != nil {
		return verificationKey{}, err
	}
	alg, err := algorithm(pub)
	if err != nil {
		return verificationKey{}, err
	}
	return verificationKey{id: id, alg: alg, key: pub}, nil
}
