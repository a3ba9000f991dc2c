package storagecrypt

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	kmsapi "k8s.io/kms/apis/v2"
)

// KMS v2 provider: envelope encryption through a plugin that holds the key
// encryption key (KEK) and serves k8s.io/kms's KeyManagementService over a
// Unix socket.
//
// The provider keeps one data encryption key seed (32 random bytes) for
// its writes, which the plugin encrypted once (Encrypt); each value is
// encrypted with AES-256-GCM under a key derived from the seed and 32
// random bytes written with it (doc.go), so one seed serves any number of
// writes. Status is polled: a new key id (the KEK rotated) makes a new
// seed, and values written under the old key id read as stale. Reads ask
// the plugin to decrypt each seed they meet once (Decrypt), then keep it.

// Defaults of the KMS polling intervals (Options).
const (
	DefaultKMSStatusInterval = time.Minute
	DefaultKMSRetryInterval  = 10 * time.Second
)

// kmsWriteTTL is how long writes go on with the current seed while the
// plugin's Status fails; kube-apiserver's bound.
const kmsWriteTTL = 3 * time.Minute

// kmsSeedBytes and kmsInfoBytes are the sizes of a seed and of the
// random info each value's key is derived with.
const (
	kmsSeedBytes = 32
	kmsInfoBytes = 32
)

// maxCachedDEKs bounds the seeds (and keys) a provider keeps decrypted.
const maxCachedDEKs = 1024

// kmsProvider is one kms entry of the configuration.
type kmsProvider struct {
	name, pfx string
	timeout   time.Duration
	conn      *grpc.ClientConn
	client    kmsapi.KeyManagementServiceClient
	log       *slog.Logger
	interval  time.Duration
	retry     time.Duration

	// state is what writes use; nil until the plugin first answered.
	state atomic.Pointer[kmsWriteState]

	// mu guards lastErr and version.
	mu sync.Mutex
	// lastErr is the outcome of the last Status poll (nil: healthy).
	lastErr error
	// version is the plugin API version of the first healthy Status.
	version string

	deks dekCache

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

var _ provider = (*kmsProvider)(nil)

// kmsWriteState is the seed writes use, as the plugin encrypted it.
type kmsWriteState struct {
	keyID         string
	encryptedSeed []byte
	annotations   map[string][]byte
	seed          []byte
	// expires is when writes stop using the seed unless a Status poll
	// succeeds before.
	expires time.Time
}

// newKMSProvider connects to the plugin, fetches a data key within the
// provider's timeout, and polls the plugin's Status until close.
func newKMSProvider(ctx context.Context, cfg *KMSConfiguration, opts Options) (*kmsProvider, error) {
	if _, err := socketPath(cfg.Endpoint); err != nil {
		return nil, fmt.Errorf("kms provider %q: %w", cfg.Name, err)
	}
	conn, err := grpc.NewClient(cfg.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kms provider %q: %w", cfg.Name, err)
	}
	timeout := DefaultKMSTimeout
	if cfg.Timeout != nil {
		timeout = cfg.Timeout.Duration
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	p := &kmsProvider{
		name: cfg.Name, pfx: kmsPrefix + cfg.Name + ":", timeout: timeout, conn: conn,
		client: kmsapi.NewKeyManagementServiceClient(conn), log: logger.With("kms_provider", cfg.Name),
		interval: orDefault(opts.KMSStatusInterval, DefaultKMSStatusInterval),
		retry:    orDefault(opts.KMSRetryInterval, DefaultKMSRetryInterval),
		done:     make(chan struct{}),
	}
	if err := p.refresh(ctx); err != nil {
		p.log.Warn("the KMS plugin did not answer: writes with it fail until it does", "err", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.run(runCtx)
	return p, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// run polls Status until ctx ends: every interval while the plugin is
// healthy, every retry interval while it is not.
func (p *kmsProvider) run(ctx context.Context) {
	defer close(p.done)
	for {
		wait := p.interval
		if p.health() != nil {
			wait = p.retry
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if err := p.refresh(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("KMS plugin status", "err", err)
		}
	}
}

// refresh asks the plugin's Status and makes a new seed when the key id
// changed; its outcome is the provider's health.
func (p *kmsProvider) refresh(ctx context.Context) error {
	err := p.status(ctx)
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
	return err
}

func (p *kmsProvider) status(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.client.Status(sctx, &kmsapi.StatusRequest{})
	if err != nil {
		return fmt.Errorf("kms provider %q: status: %w", p.name, err)
	}
	var errs []error
	if resp.GetHealthz() != "ok" {
		errs = append(errs, fmt.Errorf("got unexpected healthz status: %s", resp.GetHealthz()))
	}
	p.mu.Lock()
	switch v := resp.GetVersion(); {
	case v != "v2" && v != "v2beta1":
		errs = append(errs, fmt.Errorf("expected KMSv2 API version v2, got %s", v))
	case p.version == "":
		p.version = v
	case p.version != v:
		errs = append(errs, fmt.Errorf("KMSv2 API version should not change after the initial status response version %s, got %s", p.version, v))
	}
	p.mu.Unlock()
	if err := validateKeyID(resp.GetKeyId()); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kms provider %q is not healthy: %w", p.name, err)
	}
	st := p.state.Load()
	if st != nil && st.keyID == resp.GetKeyId() {
		next := *st
		next.expires = time.Now().Add(kmsWriteTTL)
		p.state.Store(&next)
		return nil
	}
	return p.rotate(ctx, resp.GetKeyId())
}

// rotate makes a new seed and has the plugin encrypt it with key id
// keyID.
func (p *kmsProvider) rotate(ctx context.Context, keyID string) error {
	seed := make([]byte, kmsSeedBytes)
	if _, err := rand.Read(seed); err != nil {
		return fmt.Errorf("kms provider %q: new seed: %w", p.name, err)
	}
	ectx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.client.Encrypt(ectx, &kmsapi.EncryptRequest{Plaintext: seed, Uid: newUID()})
	if err != nil {
		return fmt.Errorf("kms provider %q: encrypt a new data key: %w", p.name, err)
	}
	if err := errors.Join(validateDEKSource(resp.GetCiphertext()), validateKeyID(resp.GetKeyId()), validateAnnotations(resp.GetAnnotations())); err != nil {
		return fmt.Errorf("kms provider %q: encrypt a new data key: %w", p.name, err)
	}
	if resp.GetKeyId() != keyID {
		return fmt.Errorf("kms provider %q: the plugin encrypted the new data key with key id %q, but its status names %q", p.name, resp.GetKeyId(), keyID)
	}
	st := &kmsWriteState{
		keyID: keyID, encryptedSeed: resp.GetCiphertext(), annotations: resp.GetAnnotations(), seed: seed,
		expires: time.Now().Add(kmsWriteTTL),
	}
	p.deks.put(dekCacheKey(sourceHKDFSeed, st.encryptedSeed, st.keyID, st.annotations), &dek{seed: seed})
	old := p.state.Swap(st)
	if old != nil {
		p.log.Info("the KMS key id changed: new writes use a new data key", "key_id", keyID, "previous_key_id", old.keyID)
	}
	return nil
}

// health is nil when the provider has a data key and its plugin answered
// the last Status poll.
func (p *kmsProvider) health() error {
	p.mu.Lock()
	err := p.lastErr
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if p.state.Load() == nil {
		return fmt.Errorf("kms provider %q has no data key yet", p.name)
	}
	return nil
}

func (p *kmsProvider) prefix() string { return p.pfx }

func (p *kmsProvider) encrypt(_ context.Context, key string, plain []byte) ([]byte, error) {
	st := p.state.Load()
	if st == nil {
		return nil, fmt.Errorf("kms provider %q has no data key: %w", p.name, p.healthOrUnknown())
	}
	if time.Now().After(st.expires) {
		return nil, fmt.Errorf("kms provider %q: its data key expired while the plugin failed: %w", p.name, p.healthOrUnknown())
	}
	info := make([]byte, kmsInfoBytes, kmsInfoBytes+aesGCMNonce+len(plain)+16)
	if _, err := rand.Read(info); err != nil {
		return nil, fmt.Errorf("kms provider %q: random info: %w", p.name, err)
	}
	aead, err := seedAEAD(st.seed, info)
	if err != nil {
		return nil, err
	}
	data, err := aesGCM{aead: aead}.seal(info, plain, []byte(key))
	if err != nil {
		return nil, err
	}
	o := encryptedObject{encryptedData: data, keyID: st.keyID, encryptedDEKSource: st.encryptedSeed, annotations: st.annotations, sourceType: sourceHKDFSeed}
	out := make([]byte, 0, len(p.pfx)+len(data)+len(st.encryptedSeed)+len(st.keyID)+64)
	return o.appendTo(append(out, p.pfx...)), nil
}

// healthOrUnknown is the provider's health error, or one saying the
// plugin has not answered yet.
func (p *kmsProvider) healthOrUnknown() error {
	if err := p.health(); err != nil {
		return err
	}
	return errors.New("the plugin has not answered yet")
}

// aesGCMNonce is AES-GCM's nonce size.
const aesGCMNonce = 12

func (p *kmsProvider) decrypt(ctx context.Context, key string, data []byte) ([]byte, bool, error) {
	o, err := parseEncryptedObject(data)
	if err == nil {
		err = o.validate()
	}
	if err != nil {
		return nil, false, fmt.Errorf("kms provider %q: %w", p.name, err)
	}
	d, err := p.deks.get(dekCacheKey(o.sourceType, o.encryptedDEKSource, o.keyID, o.annotations), func() (*dek, error) {
		return p.fetchDEK(ctx, o)
	})
	if err != nil {
		return nil, false, err
	}
	var plain []byte
	switch o.sourceType {
	case sourceHKDFSeed:
		if len(o.encryptedData) < kmsInfoBytes {
			return nil, false, fmt.Errorf("kms provider %q: %w", p.name, errShort)
		}
		aead, err := seedAEAD(d.seed, o.encryptedData[:kmsInfoBytes])
		if err != nil {
			return nil, false, err
		}
		plain, err = aesGCM{aead: aead}.open(o.encryptedData[kmsInfoBytes:], []byte(key))
		if err != nil {
			return nil, false, fmt.Errorf("kms provider %q: %w", p.name, err)
		}
	default:
		plain, err = aesGCM{aead: d.aead}.open(o.encryptedData, []byte(key))
		if err != nil {
			return nil, false, fmt.Errorf("kms provider %q: %w", p.name, err)
		}
	}
	st := p.state.Load()
	stale := st == nil || o.keyID != st.keyID || o.sourceType != sourceHKDFSeed
	return plain, stale, nil
}

// fetchDEK has the plugin decrypt o's data key.
func (p *kmsProvider) fetchDEK(ctx context.Context, o *encryptedObject) (*dek, error) {
	dctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.client.Decrypt(dctx, &kmsapi.DecryptRequest{
		Ciphertext: o.encryptedDEKSource, Uid: newUID(), KeyId: o.keyID, Annotations: o.annotations,
	})
	if err != nil {
		return nil, fmt.Errorf("kms provider %q: failed to decrypt DEK: %w", p.name, err)
	}
	key := resp.GetPlaintext()
	if o.sourceType == sourceHKDFSeed {
		if len(key) < kmsSeedBytes {
			return nil, fmt.Errorf("kms provider %q: the decrypted seed is %d bytes, want %d", p.name, len(key), kmsSeedBytes)
		}
		return &dek{seed: key}, nil
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("kms provider %q: decrypted DEK: %w", p.name, err)
	}
	aead, err := cipher.NewGCM(b)
	if err != nil {
		return nil, fmt.Errorf("kms provider %q: decrypted DEK: %w", p.name, err)
	}
	return &dek{aead: aead}, nil
}

// seedAEAD is the AES-256-GCM of the key derived from seed and info.
func seedAEAD(seed, info []byte) (cipher.AEAD, error) {
	k, err := hkdf.Expand(sha256.New, seed, string(info), 32)
	if err != nil {
		return nil, fmt.Errorf("storagecrypt: derive a data key: %w", err)
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// close stops polling and closes the connection.
func (p *kmsProvider) close() error {
	var err error
	p.once.Do(func() {
		if p.cancel != nil {
			p.cancel()
			<-p.done
		}
		err = p.conn.Close()
	})
	return err
}

// newUID is a request id for the plugin's logs.
func newUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// dek is a decrypted data key: a seed, or (for older values) an AES-GCM
// key.
type dek struct {
	seed []byte
	aead cipher.AEAD
}

// dekCacheKey identifies an encrypted data key: everything the plugin is
// given to decrypt it.
func dekCacheKey(t dekSourceType, source []byte, keyID string, annotations map[string][]byte) string {
	b := binary.AppendUvarint(nil, uint64(t))
	b = binary.AppendUvarint(b, uint64(len(source)))
	b = append(b, source...)
	b = binary.AppendUvarint(b, uint64(len(keyID)))
	b = append(b, keyID...)
	for _, k := range slices.Sorted(maps.Keys(annotations)) {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(annotations[k])))
		b = append(b, annotations[k]...)
	}
	return string(b)
}

// dekCache keeps decrypted data keys, at most maxCachedDEKs; concurrent
// reads of values under one data key make one Decrypt call.
type dekCache struct {
	mu sync.Mutex
	// entries are the keys, decrypted or being decrypted; guarded by mu.
	entries map[string]*dekEntry
}

// dekEntry is a cached key; ready is closed once d or err is set.
type dekEntry struct {
	ready chan struct{}
	d     *dek
	err   error
}

// get returns the key of k, decrypting it with fetch if no one has; a
// failed fetch is not kept, so the next read asks again.
func (c *dekCache) get(k string, fetch func() (*dek, error)) (*dek, error) {
	c.mu.Lock()
	e := c.entries[k]
	if e == nil {
		e = &dekEntry{ready: make(chan struct{})}
		c.insertLocked(k, e)
		c.mu.Unlock()
		e.d, e.err = fetch()
		if e.err != nil {
			c.mu.Lock()
			if c.entries[k] == e {
				delete(c.entries, k)
			}
			c.mu.Unlock()
		}
		close(e.ready)
		return e.d, e.err
	}
	c.mu.Unlock()
	<-e.ready
	return e.d, e.err
}

// put keeps a key decrypted (the provider's own new seed).
func (c *dekCache) put(k string, d *dek) {
	e := &dekEntry{ready: make(chan struct{}), d: d}
	close(e.ready)
	c.mu.Lock()
	c.insertLocked(k, e)
	c.mu.Unlock()
}

// insertLocked adds e under k, dropping another key when the cache is
// full.
func (c *dekCache) insertLocked(k string, e *dekEntry) {
	if c.entries == nil {
		c.entries = map[string]*dekEntry{}
	}
	if len(c.entries) >= maxCachedDEKs {
		for old := range c.entries {
			delete(c.entries, old)
			break
		}
	}
	c.entries[k] = e
}
