package oidc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// maxDocumentBytes bounds the discovery document and the JWKS read from
// the issuer.
const maxDocumentBytes = 1 << 20

// keySet is the issuer's signing keys, read from the jwks_uri of its
// discovery document. Readers take the current set without a lock; fetch
// replaces it. It is safe for concurrent use.
type keySet struct {
	issuer string
	client *http.Client
	// minInterval is the least time between two fetches asked for by
	// tokens (an unknown kid, or no keys yet), so that tokens naming
	// made-up kids cannot make the gateway hammer the issuer.
	minInterval time.Duration
	now         func() time.Time

	keys atomic.Pointer[jose.JSONWebKeySet]
	// mu serializes fetches; lastFetch is when the last one began.
	mu        sync.Mutex
	lastFetch time.Time // guarded by mu
}

// current returns the keys last fetched, nil before the first fetch
// succeeded.
func (k *keySet) current() *jose.JSONWebKeySet { return k.keys.Load() }

// refreshFor fetches the keys again for a token whose key seen is not
// in (seen: the set the caller looked in), unless another fetch replaced
// that set meanwhile or the last fetch began less than minInterval ago.
// It returns the keys to look in.
func (k *keySet) refreshFor(ctx context.Context, seen *jose.JSONWebKeySet) *jose.JSONWebKeySet {
	k.mu.Lock()
	defer k.mu.Unlock()
	if cur := k.keys.Load(); cur != seen {
		return cur
	}
	if now := k.now(); !k.lastFetch.IsZero() && now.Sub(k.lastFetch) < k.minInterval {
		return seen
	}
	_ = k.fetchLocked(ctx)
	return k.keys.Load()
}

// fetch reads the discovery document and the keys it points to, and
// replaces the key set.
func (k *keySet) fetch(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fetchLocked(ctx)
}

func (k *keySet) fetchLocked(ctx context.Context) error {
	k.lastFetch = k.now()
	var disc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := k.get(ctx, strings.TrimSuffix(k.issuer, "/")+"/.well-known/openid-configuration", &disc); err != nil {
		return fmt.Errorf("oidc: discovery: %w", err)
	}
	if disc.Issuer != k.issuer {
		return fmt.Errorf("oidc: discovery: the document's issuer %q is not %q", disc.Issuer, k.issuer)
	}
	if disc.JWKSURI == "" {
		return errors.New("oidc: discovery: the document has no jwks_uri")
	}
	var set jose.JSONWebKeySet
	if err := k.get(ctx, disc.JWKSURI, &set); err != nil {
		return fmt.Errorf("oidc: keys: %w", err)
	}
	k.keys.Store(&set)
	return nil
}

// get reads the JSON document at url into v.
func (k *keySet) get(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	if len(body) > maxDocumentBytes {
		return fmt.Errorf("%s: larger than %d bytes", url, maxDocumentBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return nil
}
