// Package storage is the gateway's narrow view of the store, shaped by how
// the Kubernetes API uses it: get, list, create, update, delete and watch of
// whole objects under string keys, with mod revisions as resourceVersions.
// It translates to store.v1 Range/Txn/Watch over gRPC and turns the store's
// gRPC errors into this package's errors.
//
// Values pass through a Transformer (encryption at rest, package
// storagecrypt): every value is encrypted before it is sent to the store
// and decrypted once when it is read, so callers see only plain values
// and the store, its files and its raft log only what the Transformer
// wrote.
package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Errors returned by Store methods; match with errors.Is / errors.As.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("storage: not found")
	// ErrExists: a create found the key present.
	ErrExists = errors.New("storage: already exists")
	// ErrConflict: the key's mod revision differs from the precondition.
	ErrConflict = errors.New("storage: revision conflict")
	// ErrParentMissing: the key a create depends on (its namespace) is gone.
	ErrParentMissing = errors.New("storage: parent missing")
)

// CompactedError reports a read or watch below the compacted revision.
type CompactedError struct {
	// CompactRevision is the lowest readable revision.
	CompactRevision int64
	// Requested is the revision asked for.
	Requested int64
}

func (e *CompactedError) Error() string {
	return fmt.Sprintf("storage: revision %d has been compacted (compacted revision %d)", e.Requested, e.CompactRevision)
}

// FutureRevisionError reports a read at a revision the store has not
// reached.
type FutureRevisionError struct {
	// Current is the store's revision.
	Current int64
	// Requested is the revision asked for.
	Requested int64
}

func (e *FutureRevisionError) Error() string {
	return fmt.Sprintf("storage: revision %d is newer than the current revision %d", e.Requested, e.Current)
}

// UnreachableError is a store call that no member served: none could take
// it (UNAVAILABLE: no leader, the leadership lost before it was answered)
// or the member it went to did not answer in time (DEADLINE_EXCEEDED). It
// is worth retrying, but a write may have been applied (MayHaveApplied).
type UnreachableError struct {
	// Err is the store's gRPC error.
	Err error
	// MayHaveApplied is set for a write whose error does not prove it was
	// never proposed: it may have been committed before the member that
	// took it went away, so sending it again may meet its own effect.
	MayHaveApplied bool
}

func (e *UnreachableError) Error() string { return "storage: " + e.Err.Error() }

// Unwrap returns the store's gRPC error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// KV is one stored object.
type KV struct {
	// Key is the object's key.
	Key string
	// Value is the stored encoding.
	Value []byte
	// ModRevision is the object's resourceVersion.
	ModRevision int64
	// CreateRevision is the revision that created it.
	CreateRevision int64
	// Stale reports a value decrypted with anything but the key new
	// writes use: writing it again, even unchanged, encrypts it with that
	// key (how a key rotation reaches stored objects).
	Stale bool
}

// Transformer encrypts values before they are stored and decrypts them
// when they are read. *storagecrypt.Transformer implements it.
type Transformer interface {
	// Encrypt returns what to store under key for plain.
	Encrypt(ctx context.Context, key string, plain []byte) ([]byte, error)
	// Decrypt returns the plain value of what is stored under key, and
	// whether it is stale.
	Decrypt(ctx context.Context, key string, stored []byte) (plain []byte, stale bool, err error)
}

// Option configures a Store.
type Option func(*Store)

// WithTransformer makes the Store encrypt and decrypt values with t;
// without it values are stored as they are.
func WithTransformer(t Transformer) Option { return func(s *Store) { s.crypt = t } }

// Store talks to the store service.
type Store struct {
	kv     storev1.KVServiceClient
	watch  storev1.WatchServiceClient
	leases storev1.LeaseServiceClient
	// crypt encrypts and decrypts values; nil stores them as they are.
	crypt Transformer

	// gets batches consistent reads of single keys (Get).
	gets getBatcher

	// lease is the store lease shared by objects that expire (Events):
	// granting one per object would cost a raft write each, so, like
	// kube-apiserver, one lease is reused for leaseReuse.
	lease struct {
		sync.Mutex
		id      int64
		ttl     time.Duration
		granted time.Time
	}
}

// leaseReuse is how long one store lease is shared by expiring objects;
// each lease lives leaseReuse longer than the TTL asked for, so no object
// expires early.
const leaseReuse = time.Minute

// New returns a Store over a connection to the store service.
func New(conn grpc.ClientConnInterface, opts ...Option) *Store {
	kv := storev1.NewKVServiceClient(conn)
	s := &Store{kv: kv, watch: storev1.NewWatchServiceClient(conn), leases: storev1.NewLeaseServiceClient(conn), gets: getBatcher{kv: kv}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Lease returns a store lease that expires between ttl and
// ttl+leaseReuse from now, shared with other writes of the same minute.
func (s *Store) Lease(ctx context.Context, ttl time.Duration) (int64, error) {
	s.lease.Lock()
	defer s.lease.Unlock()
	if s.lease.id != 0 && s.lease.ttl == ttl && time.Since(s.lease.granted) < leaseReuse {
		return s.lease.id, nil
	}
	resp, err := s.leases.LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(ttl + leaseReuse)})
	if err != nil {
		return 0, convert(err, 0)
	}
	s.lease.id, s.lease.ttl, s.lease.granted = resp.GetId(), ttl, time.Now()
	return resp.GetId(), nil
}

// ReadOptions select the revision of a read.
type ReadOptions struct {
	// Revision reads history; 0 reads the current state.
	Revision int64
	// Serializable reads the answering member's local state without
	// confirming it is current.
	Serializable bool
}

// Get reads one key. It returns ErrNotFound (with the read revision) when
// the key does not exist, the Transformer's error when its value does not
// decrypt.
func (s *Store) Get(ctx context.Context, key string, opts ReadOptions) (KV, int64, error) {
	var resp *storev1.RangeResponse
	var err error
	if opts.Revision == 0 && !opts.Serializable {
		resp, err = s.gets.get(ctx, []byte(key))
	} else {
		resp, err = s.kv.Range(ctx, &storev1.RangeRequest{Key: []byte(key), Revision: opts.Revision, Serializable: opts.Serializable})
	}
	if err != nil {
		return KV{}, 0, convert(err, opts.Revision)
	}
	rev := resp.GetHeader().GetRevision()
	if len(resp.Kvs) == 0 {
		return KV{}, rev, ErrNotFound
	}
	kv, err := s.fromProto(ctx, resp.Kvs[0])
	if err != nil {
		return KV{}, rev, err
	}
	return kv, rev, nil
}

// Revision returns the store's current revision: linearizable, or the
// answering member's own when serializable.
func (s *Store) Revision(ctx context.Context, serializable bool) (int64, error) {
	resp, err := s.kv.Range(ctx, &storev1.RangeRequest{Key: []byte{0}, CountOnly: true, Serializable: serializable})
	if err != nil {
		return 0, convert(err, 0)
	}
	return resp.GetHeader().GetRevision(), nil
}

// Count returns the number of keys under prefix, as the answering
// member holds them (serializable: a count for estimates, not a read).
func (s *Store) Count(ctx context.Context, prefix string) (int64, error) {
	resp, err := s.kv.Range(ctx, &storev1.RangeRequest{Key: []byte(prefix), RangeEnd: storeclient.PrefixEnd(prefix), CountOnly: true, Serializable: true})
	if err != nil {
		return 0, convert(err, 0)
	}
	return resp.GetCount(), nil
}

// ListOptions select a page of a prefix.
type ListOptions struct {
	ReadOptions
	// Limit caps the number of keys; 0 means all.
	Limit int64
	// Start is the first key to return (for continuation); empty starts at
	// the prefix.
	Start string
	// SkipCount leaves ListResult.Count 0 for a read with a Limit: the
	// store stops at the limit instead of counting the rest of the range
	// (a cost proportional to what is left, paid again by every page).
	SkipCount bool
}

// ListResult is a page of keys.
type ListResult struct {
	// KVs are the objects, in key order.
	KVs []KV
	// Revision is the revision read at.
	Revision int64
	// More is true when Limit cut the page short.
	More bool
	// Count is the number of keys from Start to the end of the prefix (0
	// when the read asked for SkipCount).
	Count int64
}

// List reads the keys under prefix; a value that does not decrypt fails
// the whole list with the Transformer's error, as kube-apiserver's. A
// reply over gRPC's message limit (a collection of more than 64 MiB) is
// read in smaller pieces: all of it, in pages at one revision, when
// opts.Limit is 0; otherwise a shorter page (More set), which callers
// paging through continue from.
func (s *Store) List(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	res, err := s.list(ctx, prefix, opts)
	if !tooLarge(err) {
		return res, err
	}
	if opts.Limit == 0 {
		return s.listPaged(ctx, prefix, opts)
	}
	for opts.Limit > 1 && tooLarge(err) {
		opts.Limit /= 2
		res, err = s.list(ctx, prefix, opts)
	}
	return res, err
}

func (s *Store) list(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	start := prefix
	if opts.Start != "" {
		start = opts.Start
	}
	resp, err := s.kv.Range(ctx, &storev1.RangeRequest{
		Key: []byte(start), RangeEnd: storeclient.PrefixEnd(prefix),
		Limit: opts.Limit, Revision: opts.Revision, Serializable: opts.Serializable, SkipCount: opts.SkipCount,
	})
	if err != nil {
		return ListResult{}, convert(err, opts.Revision)
	}
	out := ListResult{Revision: resp.GetHeader().GetRevision(), More: resp.More, Count: resp.Count, KVs: make([]KV, 0, len(resp.Kvs))}
	for _, kv := range resp.Kvs {
		kv, err := s.fromProto(ctx, kv)
		if err != nil {
			return ListResult{}, err
		}
		out.KVs = append(out.KVs, kv)
	}
	return out, nil
}

// tooLarge reports a reply over gRPC's message limit.
func tooLarge(err error) bool {
	var se interface{ GRPCStatus() *status.Status }
	return errors.As(err, &se) && se.GRPCStatus().Code() == codes.ResourceExhausted
}

// listPageKeys is the page size of a list read in pages (List halves it
// for pages still over the limit).
const listPageKeys = 1000

// listPaged reads every key under prefix from opts.Start in pages, all at
// the revision of the first: the result of one Range, for collections
// whose single reply would exceed the message limit.
func (s *Store) listPaged(ctx context.Context, prefix string, opts ListOptions) (ListResult, error) {
	var out ListResult
	for first := true; ; first = false {
		// Every key is read, so the count is the keys read: no page needs
		// the store to count the rest.
		page, err := s.List(ctx, prefix, ListOptions{ReadOptions: opts.ReadOptions, Limit: listPageKeys, Start: opts.Start, SkipCount: true})
		if err != nil {
			return ListResult{}, err
		}
		if first {
			out.Revision = page.Revision
			opts.Revision = page.Revision
		}
		out.KVs = append(out.KVs, page.KVs...)
		if !page.More || len(page.KVs) == 0 {
			out.Count = int64(len(out.KVs))
			return out, nil
		}
		opts.Start = page.KVs[len(page.KVs)-1].Key + "\x00"
	}
}

// Parent is the key a create depends on (a namespaced object's namespace).
// The create succeeds only while Key still has mod revision ModRevision: a
// caller that checked the parent at ModRevision (a namespace is not being
// deleted) knows the check still held when the object was written,
// without a second read.
type Parent struct {
	Key         string
	ModRevision int64
}

// ParentChangedError reports a create whose parent exists but no longer has
// the mod revision the create was guarded by. KV is the parent as it is
// now, read in the same transaction, so the caller can check it again
// and retry without another round trip.
type ParentChangedError struct {
	KV KV
}

func (e *ParentChangedError) Error() string {
	return fmt.Sprintf("storage: parent %s changed (mod revision %d)", e.KV.Key, e.KV.ModRevision)
}

// Create stores a new key, attached to lease (0: none), guarded by parent
// (zero: none): the check and the write are one transaction. It returns
// the new revision, ErrExists, ErrParentMissing or a *ParentChangedError.
func (s *Store) Create(ctx context.Context, key string, value []byte, parent Parent, lease int64) (int64, error) {
	value, err := s.encrypt(ctx, key, value)
	if err != nil {
		return 0, err
	}
	cmp := []*storev1.Compare{{
		Key: []byte(key), Target: storev1.Compare_TARGET_CREATE, Result: storev1.Compare_RESULT_EQUAL,
		TargetUnion: &storev1.Compare_CreateRevision{CreateRevision: 0},
	}}
	failure := []*storev1.RequestOp{rangeOp(key, true)}
	if parent.Key != "" {
		cmp = append(cmp, &storev1.Compare{
			Key: []byte(parent.Key), Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL,
			TargetUnion: &storev1.Compare_ModRevision{ModRevision: parent.ModRevision},
		})
		failure = append(failure, rangeOp(parent.Key, false))
	}
	resp, err := s.kv.Txn(ctx, &storev1.TxnRequest{
		Compare: cmp,
		Success: []*storev1.RequestOp{putOp(key, value, lease)},
		Failure: failure,
	})
	if err != nil {
		return 0, convertWrite(err)
	}
	if resp.Succeeded {
		return resp.GetHeader().GetRevision(), nil
	}
	rs := resp.GetResponses()
	if len(rs) > 0 && len(rs[0].GetResponseRange().GetKvs()) > 0 {
		return 0, ErrExists
	}
	if len(rs) < 2 || len(rs[1].GetResponseRange().GetKvs()) == 0 {
		return 0, ErrParentMissing
	}
	pkv, err := s.fromProto(ctx, rs[1].GetResponseRange().GetKvs()[0])
	if err != nil {
		return 0, err
	}
	return 0, &ParentChangedError{KV: pkv}
}

// Update replaces a key whose mod revision is modRevision, attached to
// lease (0: none). It returns the new revision, ErrConflict when the key
// changed, or ErrNotFound.
func (s *Store) Update(ctx context.Context, key string, value []byte, modRevision, lease int64) (int64, error) {
	value, err := s.encrypt(ctx, key, value)
	if err != nil {
		return 0, err
	}
	return s.guarded(ctx, key, modRevision, putOp(key, value, lease))
}

// Delete removes a key whose mod revision is modRevision. It returns the
// revision of the delete, ErrConflict when the key changed, or ErrNotFound.
func (s *Store) Delete(ctx context.Context, key string, modRevision int64) (int64, error) {
	return s.guarded(ctx, key, modRevision, &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{
		RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(key)},
	}})
}

func (s *Store) guarded(ctx context.Context, key string, modRevision int64, op *storev1.RequestOp) (int64, error) {
	resp, err := s.kv.Txn(ctx, &storev1.TxnRequest{
		Compare: []*storev1.Compare{{
			Key: []byte(key), Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL,
			TargetUnion: &storev1.Compare_ModRevision{ModRevision: modRevision},
		}},
		Success: []*storev1.RequestOp{op},
		Failure: []*storev1.RequestOp{rangeOp(key, true)},
	})
	if err != nil {
		return 0, convertWrite(err)
	}
	if resp.Succeeded {
		return resp.GetHeader().GetRevision(), nil
	}
	if len(resp.Responses) > 0 && len(resp.Responses[0].GetResponseRange().GetKvs()) > 0 {
		return 0, ErrConflict
	}
	return 0, ErrNotFound
}

func putOp(key string, value []byte, lease int64) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: value, Lease: lease}}}
}

func rangeOp(key string, keysOnly bool) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte(key), KeysOnly: keysOnly}}}
}

// fromProto is kv with its value decrypted.
func (s *Store) fromProto(ctx context.Context, kv *storev1.KeyValue) (KV, error) {
	if kv == nil {
		return KV{}, nil
	}
	out := KV{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision, CreateRevision: kv.CreateRevision}
	if s.crypt != nil && len(kv.Value) > 0 {
		var err error
		if out.Value, out.Stale, err = s.crypt.Decrypt(ctx, out.Key, kv.Value); err != nil {
			return KV{}, err
		}
	}
	return out, nil
}

// encrypt is what to store under key for value.
func (s *Store) encrypt(ctx context.Context, key string, value []byte) ([]byte, error) {
	if s.crypt == nil {
		return value, nil
	}
	return s.crypt.Encrypt(ctx, key, value)
}

// convertWrite is convert for a write: an UnreachableError says whether
// the write may have been applied.
func convertWrite(err error) error {
	err = convert(err, 0)
	var ue *UnreachableError
	if errors.As(err, &ue) {
		ue.MayHaveApplied = !storeclient.NotProposed(ue.Err)
	}
	return err
}

// convert turns the store's gRPC errors into this package's errors; others
// pass through unchanged.
func convert(err error, requested int64) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *storev1.CompactedError:
			req := d.RequestedRevision
			if req == 0 {
				req = requested
			}
			return &CompactedError{CompactRevision: d.CompactRevision, Requested: req}
		case *storev1.FutureRevisionError:
			return &FutureRevisionError{Current: d.CurrentRevision, Requested: d.RequestedRevision}
		}
	}
	switch st.Code() {
	case codes.OutOfRange:
		return &CompactedError{Requested: requested}
	case codes.Unavailable, codes.DeadlineExceeded:
		return &UnreachableError{Err: err}
	}
	return fmt.Errorf("storage: %w", err)
}
