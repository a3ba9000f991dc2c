package storagecrypt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Options configure a Transformer. The zero value of each optional field
// means its default.
type Options struct {
	// Registry is the set of served resources: it maps store keys to
	// resources. Required.
	Registry *registry.Registry
	// Logger logs the KMS providers' state; nil means slog.Default().
	Logger *slog.Logger
	// KMSStatusInterval is how often a healthy KMS plugin's Status is
	// polled (a new key id starts a new data key); default 1m.
	KMSStatusInterval time.Duration
	// KMSRetryInterval is how often an unhealthy or unreachable plugin is
	// asked again; default 10s.
	KMSRetryInterval time.Duration
}

// DecryptError is a value that could not be decrypted: no configured
// provider or key reads it, or it is not what the key wrote.
type DecryptError struct {
	// Key is the store key of the value.
	Key string
	// Err says why.
	Err error
}

func (e *DecryptError) Error() string {
	return fmt.Sprintf("failed to decrypt the stored value of %s: %v", e.Key, e.Err)
}

func (e *DecryptError) Unwrap() error { return e.Err }

// Transformer encrypts values for the store and decrypts them, for every
// built-in resource of a registry and every custom resource, by the
// providers the configuration gives each. It is safe for concurrent use.
// Close stops its KMS providers.
type Transformer struct {
	reg *registry.Registry
	// chains are the providers of each built-in resource; a resource
	// without an entry is stored as it is.
	chains map[*registry.Resource]*chain
	// rules are the configuration's providers by the resource name a list
	// gives ("widgets.example.com", "*.example.com", "*.*"), in order;
	// nil without configuration.
	rules map[schema.GroupResource][]provider
	// custom caches the chains of custom resources (CRDs come and go at
	// run time, so they are found by their store key's group and
	// resource rather than by the registry): schema.GroupResource to
	// *chain, t.plain for one no rule names.
	custom sync.Map
	// plain reads and writes keys of no configured resource.
	plain *chain
	kms   []*kmsProvider
	// configured lists the resources with providers, in registry order.
	configured []*registry.Resource
}

// chain is one resource's list of providers.
type chain struct {
	resource  string
	providers []provider
	// identityOnly is true for a resource with no configured provider.
	identityOnly bool
}

// Identity returns a Transformer that stores every value as it is (what
// a configuration that names no resource does): it still refuses to
// return encrypted values as if they were objects.
func Identity(reg *registry.Registry) *Transformer {
	return &Transformer{reg: reg, chains: map[*registry.Resource]*chain{}, plain: &chain{providers: []provider{identity{}}, identityOnly: true}}
}

// Load builds the Transformer of the configuration file at path; an empty
// path is Identity.
func Load(ctx context.Context, path string, opts Options) (*Transformer, error) {
	if path == "" {
		if opts.Registry == nil {
			return nil, errors.New("storagecrypt: Registry is required")
		}
		return Identity(opts.Registry), nil
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		return nil, err
	}
	return New(ctx, cfg, opts)
}

// New builds the Transformer of cfg, which must be valid (ParseConfig
// checks it). KMS providers connect to their plugins and fetch a data key
// before New returns, within each one's timeout; a plugin that does not
// answer then is asked again in the background, and writes with it fail
// until it answers.
func New(ctx context.Context, cfg *EncryptionConfiguration, opts Options) (_ *Transformer, err error) {
	if opts.Registry == nil {
		return nil, errors.New("storagecrypt: Registry is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	t := Identity(opts.Registry)
	defer func() {
		if err != nil {
			_ = t.Close()
		}
	}()
	// Each list's providers, then each named resource's: the lists that
	// name it, in order.
	byGR := map[schema.GroupResource][]provider{}
	for _, rc := range cfg.Resources {
		var ps []provider
		for _, pc := range rc.Providers {
			p, err := t.newProvider(ctx, pc, opts)
			if err != nil {
				return nil, fmt.Errorf("storagecrypt: %w", err)
			}
			ps = append(ps, p)
		}
		for _, r := range rc.Resources {
			gr := schema.ParseGroupResource(r)
			byGR[gr] = append(byGR[gr], ps...)
		}
	}
	t.rules = byGR
	for _, gv := range opts.Registry.GroupVersions() {
		for _, res := range opts.Registry.Resources(gv) {
			if res.Custom != nil {
				continue
			}
			gr := storedAs(res.GVR.GroupResource())
			ps := t.providersFor(gr)
			if ps == nil || t.chains[res] != nil {
				continue
			}
			t.chains[res] = &chain{resource: grString(gr), providers: ps}
			t.configured = append(t.configured, res)
		}
	}
	return t, nil
}

// providersFor returns the providers the configuration gives gr: those of
// the lists naming it, else of its group's wildcard, else of "*.*"; nil
// when none applies.
func (t *Transformer) providersFor(gr schema.GroupResource) []provider {
	if ps := t.rules[gr]; ps != nil {
		return ps
	}
	if ps := t.rules[schema.GroupResource{Group: gr.Group, Resource: "*"}]; ps != nil {
		return ps
	}
	return t.rules[anyResource]
}

// customChain returns the providers of custom resource gr, t.plain when
// the configuration names it nowhere.
func (t *Transformer) customChain(gr schema.GroupResource) *chain {
	if c, ok := t.custom.Load(gr); ok {
		return c.(*chain)
	}
	c := t.plain
	if ps := t.providersFor(gr); ps != nil {
		c = &chain{resource: grString(gr), providers: ps}
	}
	v, _ := t.custom.LoadOrStore(gr, c)
	return v.(*chain)
}

// customGroupResource returns the group and resource of a custom
// resource's store key, /registry/<group>/<resource>/...: a CRD's group
// has a dot (apiextensions validation requires one), which no core
// resource's name (the first segment of a core key) has.
func customGroupResource(key string) (schema.GroupResource, bool) {
	rest, ok := strings.CutPrefix(key, registry.KeyRoot)
	if !ok {
		return schema.GroupResource{}, false
	}
	group, rest, ok := strings.Cut(rest, "/")
	if !ok || !strings.Contains(group, ".") {
		return schema.GroupResource{}, false
	}
	resource, _, ok := strings.Cut(rest, "/")
	if !ok || resource == "" {
		return schema.GroupResource{}, false
	}
	return schema.GroupResource{Group: group, Resource: resource}, true
}

// storedAs is the resource whose encryption configuration applies to gr:
// kube-apiserver stores events.k8s.io Events as core Events, so "events"
// configures both.
func storedAs(gr schema.GroupResource) schema.GroupResource {
	if gr == (schema.GroupResource{Group: "events.k8s.io", Resource: "events"}) {
		return schema.GroupResource{Resource: "events"}
	}
	return gr
}

// newProvider builds the provider of one configuration entry.
func (t *Transformer) newProvider(ctx context.Context, pc ProviderConfiguration, opts Options) (provider, error) {
	switch {
	case pc.Identity != nil:
		return identity{}, nil
	case pc.AESCBC != nil:
		return newKeyed("aescbc", aescbcPrefix, pc.AESCBC.Keys, newAESCBC)
	case pc.AESGCM != nil:
		return newKeyed("aesgcm", aesgcmPrefix, pc.AESGCM.Keys, newAESGCM)
	case pc.Secretbox != nil:
		return newKeyed("secretbox", secretboxPrefix, pc.Secretbox.Keys, newSecretbox)
	case pc.KMS != nil:
		p, err := newKMSProvider(ctx, pc.KMS, opts)
		if err != nil {
			return nil, err
		}
		t.kms = append(t.kms, p)
		return p, nil
	}
	return nil, errors.New("provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity")
}

// chainFor returns the providers of the resource whose store key is key:
// a built-in resource's, found in the registry, or a custom resource's,
// found by the key's group and resource whether or not its CRD is served
// now (a value outlives its CRD's changes).
func (t *Transformer) chainFor(key string) *chain {
	if len(t.rules) == 0 {
		return t.plain
	}
	if res := t.reg.ForKey(key); res != nil && res.Custom == nil {
		if c := t.chains[res]; c != nil {
			return c
		}
		return t.plain
	}
	if gr, ok := customGroupResource(key); ok {
		return t.customChain(gr)
	}
	return t.plain
}

// Encrypts reports whether res has encryption providers configured
// (identity among them): the resources a storage migration rewrites.
func (t *Transformer) Encrypts(res *registry.Resource) bool {
	if res.Custom != nil {
		return len(t.rules) > 0 && t.customChain(res.GVR.GroupResource()) != t.plain
	}
	return t.chains[res] != nil
}

// Resources returns the resources with configured providers, in the
// registry's order.
func (t *Transformer) Resources() []*registry.Resource { return t.configured }

// Encrypt returns the value to store under key for plain, encrypted by
// the first provider of key's resource. plain is not modified; the
// result may be plain itself when that provider is identity.
func (t *Transformer) Encrypt(ctx context.Context, key string, plain []byte) ([]byte, error) {
	c := t.chainFor(key)
	out, err := c.providers[0].encrypt(ctx, key, plain)
	if err != nil {
		return nil, fmt.Errorf("failed to encrypt %s: %w", key, err)
	}
	return out, nil
}

// Decrypt returns the plain value of stored, the value under key, and
// whether it is stale: read with anything but the first provider's
// current key, so that writing it again would encrypt it differently.
// The result may be stored itself (identity). Errors are *DecryptError.
func (t *Transformer) Decrypt(ctx context.Context, key string, stored []byte) (plain []byte, stale bool, err error) {
	c := t.chainFor(key)
	var errs []error
	for i, p := range c.providers {
		pfx := p.prefix()
		if !hasPrefix(stored, pfx) {
			continue
		}
		out, st, err := p.decrypt(ctx, key, stored[len(pfx):])
		if err != nil {
			if pfx == "" && !c.identityOnly {
				// Identity met an encrypted value: the providers after
				// it may read it.
				continue
			}
			errs = append(errs, err)
			continue
		}
		return out, st || i != 0, nil
	}
	switch {
	case len(errs) == 0 && !hasPrefix(stored, encryptedMark):
		errs = append(errs, fmt.Errorf("the value is stored in clear, but identity is not among the providers configured for %s", c.resource))
	case len(errs) == 0:
		errs = append(errs, fmt.Errorf("no provider configured for %s reads values written by %q", c.resource, mark(stored)))
	case c.identityOnly:
		errs = []error{fmt.Errorf("the value is encrypted (%q) but no encryption provider is configured for %s", mark(stored), t.resourceName(key))}
	}
	return nil, false, &DecryptError{Key: key, Err: errors.Join(errs...)}
}

// resourceName names the resource of key as the configuration would.
func (t *Transformer) resourceName(key string) string {
	if res := t.reg.ForKey(key); res != nil && res.Custom == nil {
		return grString(storedAs(res.GVR.GroupResource()))
	}
	if gr, ok := customGroupResource(key); ok {
		return grString(gr)
	}
	return "this key"
}

// hasPrefix is bytes.HasPrefix for a string prefix, without converting.
func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

// mark returns what names the writer of an encrypted value: its prefix up
// to the key or provider name ("k8s:enc:aescbc:v1:key1").
func mark(stored []byte) string {
	// k8s:enc:<provider>:<version>:<name>:
	fields, n := 0, 0
	for n < len(stored) && n < 128 {
		if stored[n] == ':' {
			fields++
			if fields == 5 {
				break
			}
		}
		n++
	}
	return strings.TrimSuffix(printable(stored[:n], 128), ":")
}

// Close stops the KMS providers and closes their connections. It is safe
// to call more than once.
func (t *Transformer) Close() error {
	var errs []error
	for _, p := range t.kms {
		errs = append(errs, p.close())
	}
	return errors.Join(errs...)
}

// Check reports the health of the KMS providers: nil when each has a
// current data key from a healthy plugin (or there is none).
func (t *Transformer) Check(context.Context) error {
	var errs []error
	for _, p := range t.kms {
		errs = append(errs, p.health())
	}
	return errors.Join(errs...)
}

// HasKMS reports whether a KMS provider is configured.
func (t *Transformer) HasKMS() bool { return len(t.kms) > 0 }
