// Package serviceaccount issues and verifies ServiceAccount tokens as
// kube-apiserver does: bound, audience- and time-limited JWTs signed with
// the control plane's key (--service-account-signing-key-file), issued by
// the TokenRequest subresource (`kubectl create token`), verified with
// every configured public key (--service-account-key-file) against an
// in-memory index of the objects they name (Index), and published with the
// OpenID discovery documents other systems verify them with.
//
// The key files are read again when they change, so a key rotation
// (`meridian pki rotate-sa-key`) needs no restart: new tokens are signed
// with the new key, and tokens signed with the old one verify for as long
// as its public key stays in a key file.
package serviceaccount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"k8s.io/apimachinery/pkg/types"
)

// Expiration bounds of TokenRequest, as kube-apiserver's.
const (
	// DefaultExpiration is a token's lifetime when the request names none.
	DefaultExpiration = time.Hour
	// MinExpiration is the shortest lifetime a request may ask for.
	MinExpiration = 10 * time.Minute
	// maxExpirationSeconds is the longest any request may ask for: 2^32 s.
	maxExpirationSeconds = 1 << 32
)

// DefaultReloadInterval is how often, at most, the key files are looked
// at for a change when Config.ReloadInterval is 0.
const DefaultReloadInterval = 5 * time.Second

// Objects answers whether the objects a token names still exist: UID
// returns the UID of the object of kind ("ServiceAccount", "Pod",
// "Secret", "Node") namespace/name. *Index implements it.
type Objects interface {
	UID(kind, namespace, name string) (types.UID, bool)
}

// Getter reads one stored object, linearizably: a TokenRequest binds the
// token to the object as it is now. *storage.Store implements it.
type Getter interface {
	Get(ctx context.Context, key string, opts storage.ReadOptions) (storage.KV, int64, error)
}

// Config configures Tokens.
type Config struct {
	// Issuer is the "iss" of the tokens issued and the only one accepted
	// (--service-account-issuer). Required. An https URL makes the
	// discovery documents servable.
	Issuer string
	// APIAudiences are the audiences the API accepts and new tokens get
	// when a request names none (--api-audiences); empty means Issuer.
	APIAudiences []string
	// SigningKeyFile is the PEM private key that signs new tokens
	// (--service-account-signing-key-file); empty: no token is issued
	// (TokenRequest fails), tokens are only verified.
	SigningKeyFile string
	// KeyFiles hold the public keys that verify tokens
	// (--service-account-key-file); the signing key's public half
	// verifies too.
	KeyFiles []string
	// MaxExpiration caps the lifetime of new tokens
	// (--service-account-max-token-expiration); 0: only 2^32 seconds.
	MaxExpiration time.Duration
	// JWKSURI is the jwks_uri of the discovery document
	// (--service-account-jwks-uri); empty means Issuer + "/openid/v1/jwks".
	JWKSURI string
	// Objects tells which service accounts and bound objects exist (an
	// *Index). Required.
	Objects Objects
	// Store, Codec and Registry read the service account and the bound
	// object of a TokenRequest. Required to issue tokens.
	Store    Getter
	Codec    *codec.Codec
	Registry *registry.Registry
	// ReloadInterval is the least time between two looks at the key
	// files; 0 means DefaultReloadInterval.
	ReloadInterval time.Duration
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
}

// Validate reports every problem with cfg.
func (c *Config) Validate() error {
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("serviceaccount: an issuer (--service-account-issuer) is required"))
	} else if badIssuer(c.Issuer) {
		errs = append(errs, fmt.Errorf("serviceaccount: issuer %q must be a URL or contain no ':'", c.Issuer))
	}
	if c.SigningKeyFile == "" && len(c.KeyFiles) == 0 {
		errs = append(errs, errors.New("serviceaccount: a signing key file or a key file is required"))
	}
	if c.MaxExpiration != 0 && c.MaxExpiration < MinExpiration {
		errs = append(errs, fmt.Errorf("serviceaccount: the max token expiration %v is shorter than %v", c.MaxExpiration, MinExpiration))
	}
	if c.Objects == nil {
		errs = append(errs, errors.New("serviceaccount: Objects is required"))
	}
	if c.SigningKeyFile != "" && (c.Store == nil || c.Codec == nil || c.Registry == nil) {
		errs = append(errs, errors.New("serviceaccount: issuing tokens needs a Store, a Codec and a Registry"))
	}
	return errors.Join(errs...)
}

// badIssuer reports an issuer kube-apiserver refuses: one that is not a
// URL yet contains a colon.
func badIssuer(iss string) bool {
	u, err := url.Parse(iss)
	if err == nil && u.Scheme != "" && u.Host != "" {
		return false
	}
	for _, r := range iss {
		if r == ':' {
			return true
		}
	}
	return false
}

// Tokens issues and verifies service account tokens. It is safe for
// concurrent use.
type Tokens struct {
	cfg      Config
	keys     *keyFiles
	verified verifiedTokens
}

// New reads the key files and returns Tokens.
func New(cfg Config) (*Tokens, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(cfg.APIAudiences) == 0 {
		cfg.APIAudiences = []string{cfg.Issuer}
	}
	if cfg.ReloadInterval == 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.JWKSURI == "" {
		cfg.JWKSURI = cfg.Issuer + "/openid/v1/jwks"
	}
	keys, err := loadKeyFiles(cfg.SigningKeyFile, cfg.KeyFiles, cfg.ReloadInterval, cfg.Now, cfg.Logger)
	if err != nil {
		return nil, err
	}
	return &Tokens{cfg: cfg, keys: keys}, nil
}

// APIAudiences are the audiences the API accepts.
func (t *Tokens) APIAudiences() []string { return t.cfg.APIAudiences }
