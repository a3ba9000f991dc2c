package server

import (
	"context"
	"fmt"

	"github.com/meridian-cp/meridian/lib/kube/selection"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// notCompacted fails with 410 Expired when the store has compacted
// revision rev, as a store read of a continue token's next page at rev
// would: a chunk continued from a kept snapshot keeps the lifetime of a
// continue token kube-apiserver serves from etcd (until the store compacts
// its revision), though watchfanout could still serve it. One read of at
// most one key, with no value; the current revision is never compacted.
func (s *Server) notCompacted(ctx context.Context, prefix string, rev int64) error {
	if rev >= s.cfg.Cache.Rev() {
		return nil
	}
	_, err := s.cfg.KV.Range(ctx, &storev1.RangeRequest{Key: []byte(prefix), RangeEnd: storeclient.PrefixEnd(prefix), Revision: rev, Serializable: true, Limit: 1, KeysOnly: true, SkipCount: true})
	return s.storeReadError(err, rev)
}

// storeReadError is the Kubernetes error of a failed store read of a list
// at revision rev (nil for nil): 410 Expired once the store compacted rev,
// 504 ResourceVersionTooLarge before it has reached it, else 503.
func (s *Server) storeReadError(err error, rev int64) error {
	switch status.Code(err) {
	case codes.OK:
		return nil
	case codes.OutOfRange:
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d: the store compacted the list's revision; start a new list", rev))
	case codes.FailedPrecondition:
		return tooLargeResourceVersion(rev, s.cfg.Cache.Rev())
	}
	return apierrors.NewServiceUnavailable(fmt.Sprintf("store: %v", err))
}

// listStore reads a chunk of a list from the store at revision rev: what
// the cache cannot serve (an exact revision it keeps no snapshot of, a
// continue token whose snapshot expired).
func (s *Server) listStore(ctx context.Context, r *cache.Resource, prefix, start string, rev, limit int64, flt *selection.Filter) (listPage, error) {
	p := listPage{rev: rev}
	end := storeclient.PrefixEnd(prefix)
	key := []byte(start)
	for {
		req := &storev1.RangeRequest{Key: key, RangeEnd: end, Revision: rev, Serializable: true}
		if limit > 0 {
			req.Limit = limit - int64(len(p.items))
			// Only a list without a filter reports the keys left
			// (remainingItemCount); otherwise spare the store counting them.
			req.SkipCount = !flt.Empty()
		}
		resp, err := s.cfg.KV.Range(ctx, req)
		if err != nil {
			return p, s.storeReadError(err, rev)
		}
		kvs := resp.GetKvs()
		for _, kv := range kvs {
			value, err := s.cfg.Cache.Plain(ctx, string(kv.GetKey()), kv.GetValue())
			if err != nil {
				return p, apierrors.NewInternalError(err)
			}
			obj := r.Registry().New()
			if err := s.cfg.Codec.DecodeStorage(value, kv.GetModRevision(), obj); err != nil {
				return p, apierrors.NewInternalError(err)
			}
			r.Registry().DefaultOnRead(obj)
			if flt.Matches(obj) {
				p.items = append(p.items, obj)
			}
		}
		if !resp.GetMore() || len(kvs) == 0 {
			return p, nil
		}
		key = append(append([]byte(nil), kvs[len(kvs)-1].GetKey()...), 0)
		if limit > 0 && int64(len(p.items)) >= limit {
			p.next = string(key)
			if flt.Empty() {
				n := resp.GetCount() - int64(len(kvs))
				p.remaining = &n
			}
			return p, nil
		}
	}
}
