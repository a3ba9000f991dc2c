// Package storagemigrate is `meridian storage-migrate`: it rewrites the
// stored objects of the resources an encryption configuration names
// (built-in ones, and custom resources of the CRDs in the store) whose
// values are stale (encrypted with anything but the configuration's
// current key, or stored in clear where a provider now encrypts), so that
// each is encrypted with the current key. That completes a key rotation:
// once it has run, the old key can leave the configuration.
//
// Each rewrite is the object's own plain value, encrypted again, written
// by a transaction guarded by the mod revision it was read at: a write
// that raced it wins, and the object is read again. The object gets a new
// resourceVersion and its watchers a MODIFIED event, as kube-apiserver's
// storage migration gives them; nothing else about it changes, its lease
// (an Event's expiry) included.
package storagemigrate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

// Transformer decrypts what the store holds and encrypts it again with the
// current key. *storagecrypt.Transformer implements it.
type Transformer interface {
	Encrypt(ctx context.Context, key string, plain []byte) ([]byte, error)
	Decrypt(ctx context.Context, key string, stored []byte) (plain []byte, stale bool, err error)
}

// Config configures Run.
type Config struct {
	// KV is the store's KV service, called with the gateway's identity
	// (O=meridian:gateways), which may read and write keys. Required.
	KV storev1.KVServiceClient
	// Transformer is the encryption configuration's. Required.
	Transformer Transformer
	// Resources are the resources to migrate. Required.
	Resources []*registry.Resource
	// DryRun counts the stale objects without writing.
	DryRun bool
	// PageSize is how many keys one read returns; default 500.
	PageSize int64
	// Logger logs each object that fails; nil means slog.Default().
	Logger *slog.Logger
}

// Result is what Run did to one resource.
type Result struct {
	// Resource is the resource's group/resource.
	Resource string
	// Objects were read; Stale needed a rewrite; Rewritten were written
	// (0 for a dry run); Failed did not decrypt or could not be written
	// (each is logged).
	Objects, Stale, Rewritten, Failed int
}

// ErrFailed reports that some objects could not be migrated.
var ErrFailed = errors.New("storagemigrate: some objects could not be migrated")

// Defaults and bounds.
const (
	defaultPageSize = 500
	// maxBatchOps and maxBatchBytes bound one transaction of rewrites.
	maxBatchOps   = 64
	maxBatchBytes = 1 << 20
	// maxAttempts bounds the rewrites of one object that keep losing to
	// other writers.
	maxAttempts = 5
)

// Run migrates each resource of cfg and returns what it did, in order.
// It returns ErrFailed (with the results) when an object failed, and
// stops at the first error of the store.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if cfg.KV == nil || cfg.Transformer == nil {
		return nil, errors.New("storagemigrate: KV and Transformer are required")
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = defaultPageSize
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &migration{cfg: cfg}
	var out []Result
	failed := false
	for _, res := range cfg.Resources {
		r, err := m.resource(ctx, res)
		out = append(out, r)
		if err != nil {
			return out, err
		}
		failed = failed || r.Failed > 0
	}
	if failed {
		return out, ErrFailed
	}
	return out, nil
}

// migration is one Run.
type migration struct {
	cfg Config
}

// rewrite is one stale object and its value encrypted again.
type rewrite struct {
	kv    *storev1.KeyValue
	value []byte
}

// resource migrates the objects of one resource, page by page at the
// store's current state: an object created meanwhile was written with the
// current key already.
func (m *migration) resource(ctx context.Context, res *registry.Resource) (Result, error) {
	r := Result{Resource: res.GVR.GroupResource().String()}
	err := scan(ctx, m.cfg.KV, res.KeyPrefix(""), m.cfg.PageSize, func(kvs []*storev1.KeyValue) error {
		var batch []rewrite
		size := 0
		for _, kv := range kvs {
			r.Objects++
			rw, ok := m.prepare(ctx, kv, &r)
			if !ok {
				continue
			}
			r.Stale++
			if m.cfg.DryRun {
				continue
			}
			if len(batch) == maxBatchOps || size+len(rw.value) > maxBatchBytes {
				if err := m.write(ctx, batch, &r); err != nil {
					return err
				}
				batch, size = batch[:0], 0
			}
			batch = append(batch, rw)
			size += len(rw.value)
		}
		return m.write(ctx, batch, &r)
	})
	return r, err
}

// scan calls page with the keys under prefix, pageSize at a time in key
// order, each page read at the store's current state; it stops at the
// first error.
func scan(ctx context.Context, kv storev1.KVServiceClient, prefix string, pageSize int64, page func([]*storev1.KeyValue) error) error {
	start := []byte(prefix)
	for {
		resp, err := kv.Range(ctx, &storev1.RangeRequest{
			Key: start, RangeEnd: storeclient.PrefixEnd(prefix), Limit: pageSize, SkipCount: true,
		})
		if err != nil {
			return fmt.Errorf("storagemigrate: read %s: %w", prefix, err)
		}
		kvs := resp.GetKvs()
		if err := page(kvs); err != nil {
			return err
		}
		if !resp.GetMore() || len(kvs) == 0 {
			return nil
		}
		start = append(append([]byte(nil), kvs[len(kvs)-1].GetKey()...), 0)
	}
}

// prepare decrypts kv and, when it is stale, encrypts it again; false
// when there is nothing to write (counted as failed when it does not
// decrypt).
func (m *migration) prepare(ctx context.Context, kv *storev1.KeyValue, r *Result) (rewrite, bool) {
	key := string(kv.GetKey())
	plain, stale, err := m.cfg.Transformer.Decrypt(ctx, key, kv.GetValue())
	if err != nil {
		r.Failed++
		m.cfg.Logger.Error("cannot migrate an object", "key", key, "err", err)
		return rewrite{}, false
	}
	if !stale {
		return rewrite{}, false
	}
	value, err := m.cfg.Transformer.Encrypt(ctx, key, plain)
	if err != nil {
		r.Failed++
		m.cfg.Logger.Error("cannot migrate an object", "key", key, "err", err)
		return rewrite{}, false
	}
	return rewrite{kv: kv, value: value}, true
}

// write rewrites a batch in one transaction, each object guarded by the
// mod revision it was read at; when any changed meanwhile, each is
// written on its own.
func (m *migration) write(ctx context.Context, batch []rewrite, r *Result) error {
	if len(batch) == 0 {
		return nil
	}
	req := &storev1.TxnRequest{}
	for _, rw := range batch {
		req.Compare = append(req.Compare, unchanged(rw.kv))
		req.Success = append(req.Success, put(rw))
	}
	resp, err := m.cfg.KV.Txn(ctx, req)
	if err != nil {
		return fmt.Errorf("storagemigrate: write: %w", err)
	}
	if resp.GetSucceeded() {
		r.Rewritten += len(batch)
		return nil
	}
	for _, rw := range batch {
		if err := m.writeOne(ctx, rw, r); err != nil {
			return err
		}
	}
	return nil
}

// writeOne rewrites one object, reading it again each time another write
// got there first.
func (m *migration) writeOne(ctx context.Context, rw rewrite, r *Result) error {
	key := rw.kv.GetKey()
	for range maxAttempts {
		resp, err := m.cfg.KV.Txn(ctx, &storev1.TxnRequest{
			Compare: []*storev1.Compare{unchanged(rw.kv)},
			Success: []*storev1.RequestOp{put(rw)},
			Failure: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: key}}}},
		})
		if err != nil {
			return fmt.Errorf("storagemigrate: write %s: %w", key, err)
		}
		if resp.GetSucceeded() {
			r.Rewritten++
			return nil
		}
		kvs := resp.GetResponses()[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return nil // deleted meanwhile
		}
		var ok bool
		var again Result
		if rw, ok = m.prepare(ctx, kvs[0], &again); !ok {
			// Rewritten with the current key meanwhile, or it no longer
			// decrypts (logged).
			r.Failed += again.Failed
			return nil
		}
	}
	r.Failed++
	m.cfg.Logger.Error("cannot migrate an object: other writers changed it on every attempt", "key", string(key), "attempts", maxAttempts)
	return nil
}

// unchanged compares a key's mod revision with kv's.
func unchanged(kv *storev1.KeyValue) *storev1.Compare {
	return &storev1.Compare{
		Key: kv.GetKey(), Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL,
		TargetUnion: &storev1.Compare_ModRevision{ModRevision: kv.GetModRevision()},
	}
}

// put writes rw's new value, keeping the key's lease.
func put(rw rewrite) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{
		Key: rw.kv.GetKey(), Value: rw.value, Lease: rw.kv.GetLease(),
	}}}
}
