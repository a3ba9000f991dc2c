package serviceaccount

import (
	"sync"

	"github.com/go-jose/go-jose/v4/jwt"
)

// maxVerifiedTokens bounds how many tokens Tokens remembers; beyond it,
// each new one replaces an arbitrary one.
const maxVerifiedTokens = 4096

// verifiedToken is what a token whose signature verified says.
type verifiedToken struct {
	public  jwt.Claims
	private privateClaims
}

// verifiedTokens remembers the tokens whose signature verified, by the
// SHA-256 of the token (the token itself is not kept), with the key set
// that verified them, so that a client's requests pay for the signature
// check once: checking it on every request would cost more than the rest
// of a GET. Only the signature is remembered: every request still checks
// the token's times, audiences and objects (Tokens.check). An entry is
// used only with the key set it was verified with, so a key removed from
// the key files stops verifying at once. It is safe for concurrent use.
type verifiedTokens struct {
	mu sync.RWMutex
	m  map[[32]byte]verifiedEntry // guarded by mu
}

type verifiedEntry struct {
	keys  *keySet
	token verifiedToken
}

// get returns what the token of hash sum says when it verified with ks.
func (v *verifiedTokens) get(sum [32]byte, ks *keySet) (verifiedToken, bool) {
	v.mu.RLock()
	e, ok := v.m[sum]
	v.mu.RUnlock()
	if !ok || e.keys != ks {
		return verifiedToken{}, false
	}
	return e.token, true
}

// put records that the token of hash sum verified with ks.
func (v *verifiedTokens) put(sum [32]byte, ks *keySet, tok verifiedToken) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil {
		v.m = make(map[[32]byte]verifiedEntry)
	}
	if len(v.m) >= maxVerifiedTokens {
		for k := range v.m {
			delete(v.m, k)
			break
		}
	}
	v.m[sum] = verifiedEntry{keys: ks, token: tok}
}
