package authn

import (
	"crypto/x509"
	"slices"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
)

// maxVerifiedCerts bounds how many client certificates an Authenticator
// remembers; beyond it, each new one replaces an arbitrary one.
const maxVerifiedCerts = 4096

// verifiedCerts remembers the client certificates that verified, by their
// DER bytes, with the user each names and the end of the chain's validity.
// A client's requests — on one connection or on later ones — pay for the
// chain's signature checks once. Certificates that failed are not kept:
// they are checked again on every request, as a handshake that verified
// them would have been. It is safe for concurrent use.
type verifiedCerts struct {
	mu sync.RWMutex
	m  map[string]verdict // guarded by mu
}

// verdict is what a verified certificate established.
type verdict struct {
	user identity.User
	// until is the earliest NotAfter of the verified chain.
	until time.Time
}

func newVerifiedCerts() verifiedCerts {
	return verifiedCerts{m: make(map[string]verdict)}
}

// get returns the user of the certificate der when it verified and its
// chain is still valid at now. The user's groups are the caller's to keep.
func (v *verifiedCerts) get(der []byte, now time.Time) (identity.User, bool) {
	v.mu.RLock()
	d, ok := v.m[string(der)]
	v.mu.RUnlock()
	if !ok || now.After(d.until) {
		return identity.User{}, false
	}
	u := d.user
	u.Groups = slices.Clone(u.Groups)
	return u, true
}

// put records that the certificate der verified, naming u, until until.
func (v *verifiedCerts) put(der []byte, u identity.User, until time.Time) {
	u.Groups = slices.Clone(u.Groups)
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.m) >= maxVerifiedCerts {
		for k := range v.m {
			delete(v.m, k)
			break
		}
	}
	v.m[string(der)] = verdict{user: u, until: until}
}

// chainExpiry is the earliest NotAfter of a chain.
func chainExpiry(chain []*x509.Certificate) time.Time {
	until := chain[0].NotAfter
	for _, c := range chain[1:] {
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	return until
}
