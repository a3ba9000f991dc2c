package serviceaccount

import (
	"crypto"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/meridian-cp/meridian/lib/pki"
)

// keySet is the keys read from the key files at one time. It is immutable.
type keySet struct {
	// signer signs new tokens; nil when no signing key is configured.
	signer jose.Signer
	// verify are the keys that verify tokens: every key of the key files
	// and the signing key's public half, each once.
	verify []verificationKey
	// jwks is the JSON Web Key Set of verify, as /openid/v1/jwks serves it.
	jwks []byte
	// algs are the algorithms of verify, for the discovery document.
	algs []string
}

// keyFiles reads the key files again when they change (lib/pki's
// StatFiles and SameFiles), at most once an interval, so that a rotated
// signing key signs the next tokens and a new public key verifies tokens
// without a restart. A change that does not load is logged, and the keys
// read before stay in use. It is safe for concurrent use.
type keyFiles struct {
	signingFile string
	keyFiles    []string
	interval    time.Duration
	now         func() time.Time
	log         *slog.Logger

	keys atomic.Pointer[keySet]
	// next is the earliest time (unix nanoseconds) of the next look.
	next atomic.Int64
	// mu is held by the one caller that looks at the files; stamps is
	// what it saw last.
	mu     sync.Mutex
	stamps []os.FileInfo
}

// loadKeyFiles reads the key files; it fails when they do not load now:
// the gateway must not start with keys it cannot use.
func loadKeyFiles(signingFile string, files []string, interval time.Duration, now func() time.Time, log *slog.Logger) (*keyFiles, error) {
	k := &keyFiles{signingFile: signingFile, keyFiles: files, interval: interval, now: now, log: log}
	stamps, err := pki.StatFiles(k.paths()...)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: %w", err)
	}
	ks, err := k.read()
	if err != nil {
		return nil, err
	}
	k.stamps = stamps
	k.keys.Store(ks)
	k.next.Store(now().Add(interval).UnixNano())
	return k, nil
}

func (k *keyFiles) paths() []string {
	p := append([]string(nil), k.keyFiles...)
	if k.signingFile != "" {
		p = append(p, k.signingFile)
	}
	return p
}

// current returns the keys, first reading the files again when they
// changed and the interval has passed since the last look.
func (k *keyFiles) current() *keySet {
	now := k.now()
	if now.UnixNano() >= k.next.Load() && k.mu.TryLock() {
		k.next.Store(now.Add(k.interval).UnixNano())
		k.reloadLocked()
		k.mu.Unlock()
	}
	return k.keys.Load()
}

func (k *keyFiles) reloadLocked() {
	stamps, err := pki.StatFiles(k.paths()...)
	if err != nil {
		if k.stamps != nil {
			k.log.Error("service account keys: cannot look at the key files; using the keys read before", "error", err)
		}
		k.stamps = nil
		return
	}
	if pki.SameFiles(stamps, k.stamps) {
		return
	}
	k.stamps = stamps
	ks, err := k.read()
	if err != nil {
		k.log.Error("service account keys: the changed key files do not load; using the keys read before", "error", err)
		return
	}
	k.keys.Store(ks)
	k.log.Info("service account keys reloaded", "verification_keys", len(ks.verify), "signing_key_file", k.signingFile)
}

// read loads every key file into a keySet.
func (k *keyFiles) read() (*keySet, error) {
	ks := &keySet{}
	var pubs []crypto.PublicKey
	if k.signingFile != "" {
		priv, err := LoadPrivateKey(k.signingFile)
		if err != nil {
			return nil, err
		}
		vk, err := newVerificationKey(priv.Public())
		if err != nil {
			return nil, err
		}
		ks.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: vk.alg, Key: jose.JSONWebKey{Key: priv, KeyID: vk.id}},
			(&jose.SignerOptions{}).WithType("JWT"))
		if err != nil {
			return nil, fmt.Errorf("serviceaccount: signing key %s: %w", k.signingFile, err)
		}
		pubs = append(pubs, priv.Public())
	}
	for _, f := range k.keyFiles {
		keys, err := LoadPublicKeys(f)
		if err != nil {
			return nil, err
		}
		pubs = append(pubs, keys...)
	}
	if len(pubs) == 0 {
		return nil, errors.New("serviceaccount: no key configured")
	}
	seen := map[string]bool{}
	algs := map[jose.SignatureAlgorithm]bool{}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{}}
	for _, pub := range pubs {
		vk, err := newVerificationKey(pub)
		if err != nil {
			return nil, err
		}
		if seen[vk.id] {
			continue
		}
		seen[vk.id] = true
		ks.verify = append(ks.verify, vk)
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: pub, KeyID: vk.id, Algorithm: string(vk.alg), Use: "sig"})
		if !algs[vk.alg] {
			algs[vk.alg] = true
			ks.algs = append(ks.algs, string(vk.alg))
		}
	}
	jwks, err := json.Marshal(set)
	if err != nil {
		return nil, fmt.Errorf("serviceaccount: JWKS: %w", err)
	}
	ks.jwks = jwks
	return ks, nil
}
