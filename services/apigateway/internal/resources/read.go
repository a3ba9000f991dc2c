package resources

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Get reads one object. resourceVersion "" is a linearizable read, "0" is
// served from the answering store member as it is, N must be reached.
func (s *Server) Get(ctx context.Context, req *apiv1.GetRequest) (*httpbody.HttpBody, error) {
	res, err := s.resolve(req.GetRef(), true)
	if err != nil {
		return nil, toGRPC(err)
	}
	out, err := negotiateOutput(req.GetAccept(), req.GetIncludeObject(), negotiation.Reads)
	if err != nil {
		return nil, toGRPC(err)
	}
	opts, minRV, err := readOptions(req.GetResourceVersion(), "")
	if err != nil {
		return nil, toGRPC(err)
	}
	if body, handled, err := s.cachedGet(ctx, res, req, out); handled {
		return body, toGRPC(err)
	}
	obj, _, err := s.get(ctx, res, req.GetRef().GetNamespace(), req.GetRef().GetName(), opts, minRV)
	if err != nil {
		return nil, toGRPC(err)
	}
	return toGRPCBody(s.respondAs(res, obj, out))
}

// get reads and decodes one object; rev is the store revision read at.
func (s *Server) get(ctx context.Context, res *registry.Resource, ns, name string, opts storage.ReadOptions, minRV int64) (runtime.Object, int64, error) {
	if err := s.waitForRevision(ctx, minRV); err != nil {
		return nil, 0, err
	}
	kv, rev, err := s.cfg.Store.Get(ctx, res.Key(ns, name), opts)
	if err == nil || err == storage.ErrNotFound {
		if minRV > 0 && rev < minRV {
			return nil, 0, apistatus.TooLargeResourceVersion(minRV, rev)
		}
	}
	if err != nil {
		return nil, 0, storageError(err, res, ns, name)
	}
	obj := res.New()
	if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
		return nil, 0, apierrors.NewInternalError(err)
	}
	return obj, rev, nil
}

// readOptions turns resourceVersion and resourceVersionMatch into a store
// read, per the resourceVersion table of the API concepts:
//
//	""            most recent: linearizable
//	"0"           any: the answering member's state
//	N             not older than N (also with match=NotOlderThan)
//	N, Exact      exactly revision N
//
// minRV is the revision the read must reach (NotOlderThan), or 0.
func readOptions(rv, match string) (opts storage.ReadOptions, minRV int64, err error) {
	switch match {
	case "", string(metav1.ResourceVersionMatchNotOlderThan), string(metav1.ResourceVersionMatchExact):
	default:
		return opts, 0, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch: unsupported value %q: supported values are %q and %q",
			match, metav1.ResourceVersionMatchNotOlderThan, metav1.ResourceVersionMatchExact))
	}
	if rv == "" {
		if match != "" {
			return opts, 0, apierrors.NewBadRequest("resourceVersionMatch is forbidden unless resourceVersion is provided")
		}
		return opts, 0, nil
	}
	n, perr := strconv.ParseInt(rv, 10, 64)
	if perr != nil || n < 0 {
		return opts, 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resourceVersion %q: it must be an integer", rv))
	}
	if n == 0 {
		if match == string(metav1.ResourceVersionMatchExact) {
			return opts, 0, apierrors.NewBadRequest(`resourceVersionMatch "Exact" is forbidden for resourceVersion "0"`)
		}
		return storage.ReadOptions{Serializable: true}, 0, nil
	}
	if match == string(metav1.ResourceVersionMatchExact) {
		return storage.ReadOptions{Revision: n, Serializable: true}, 0, nil
	}
	return storage.ReadOptions{Serializable: true}, n, nil
}

// List reads a collection, filtered by selectors, optionally in chunks.
// Lists the watch tier can serve go there (cachedList; JSON relayed as the
// tier streams it). From the store, JSON lists stream (see streamList);
// protobuf lists are spliced from the stored bytes (see spliceList) unless
// a selector needs a kind's own fields; other encodings, Tables and
// metadata-only lists are built whole and sent as one message.
func (s *Server) List(req *apiv1.ListRequest, stream apiv1.ResourceService_ListServer) error {
	ctx := stream.Context()
	res, err := s.resolve(req.GetRef(), false)
	if err != nil {
		return toGRPC(err)
	}
	out, err := negotiateOutput(req.GetAccept(), req.GetIncludeObject(), negotiation.Reads)
	if err != nil {
		return toGRPC(err)
	}
	filter, err := selection.New(res, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return toGRPC(err)
	}
	if req.GetLimit() < 0 {
		return toGRPC(apierrors.NewBadRequest("limit must not be negative"))
	}
	if _, _, err := readOptions(req.GetResourceVersion(), req.GetResourceVersionMatch()); err != nil && req.GetContinueToken() == "" {
		return toGRPC(err)
	}
	if handled, err := s.cachedList(ctx, res, req, out, stream); handled {
		return toGRPC(err)
	}
	if out.mediaType == negotiation.JSON && !out.table && !out.partial {
		return toGRPC(s.streamList(ctx, res, req, filter, stream))
	}
	if spliceable(out, filter) {
		if handled, err := s.spliceList(ctx, res, req, filter, stream); handled {
			return toGRPC(err)
		}
	}
	list, err := s.list(ctx, res, req, filter)
	if err != nil {
		return toGRPC(err)
	}
	body, err := s.respondAs(res, list, out)
	if err != nil {
		return toGRPC(err)
	}
	return stream.Send(body)
}

// listOptions turns a list request's resourceVersion, match and continue
// token into the store read of its first page, and waits for a
// NotOlderThan revision. minRV is that revision (0: none).
func (s *Server) listOptions(ctx context.Context, req *apiv1.ListRequest, prefix string) (opts storage.ListOptions, minRV int64, err error) {
	opts.Limit = req.GetLimit()
	if tok := req.GetContinueToken(); tok != "" {
		if req.GetResourceVersion() != "" && req.GetResourceVersion() != "0" {
			return opts, 0, apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		if req.GetResourceVersionMatch() != "" {
			return opts, 0, apierrors.NewBadRequest("specifying resourceVersionMatch is not allowed when using continue")
		}
		rev, start, err := continuetoken.Decode(tok, prefix)
		if err != nil {
			return opts, 0, err
		}
		opts.Start = start
		if rev > 0 {
			opts.Revision, opts.Serializable = rev, true
		}
	} else {
		ro, m, err := readOptions(req.GetResourceVersion(), req.GetResourceVersionMatch())
		if err != nil {
			return opts, 0, err
		}
		opts.ReadOptions, minRV = ro, m
	}
	return opts, minRV, s.waitForRevision(ctx, minRV)
}

// listPage reads one page, mapping a compacted continue revision to the
// 410 kube-apiserver returns for it.
func (s *Server) listPage(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, prefix string, opts storage.ListOptions) (storage.ListResult, error) {
	page, err := s.cfg.Store.List(ctx, prefix, opts)
	var compacted *storage.CompactedError
	if errors.As(err, &compacted) && req.GetContinueToken() != "" {
		return page, expiredContinue(prefix, opts.Start)
	}
	if err != nil {
		return page, storageError(err, res, req.GetRef().GetNamespace(), "")
	}
	return page, nil
}

func (s *Server) list(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, filter *selection.Filter) (runtime.Object, error) {
	prefix := keyRange(res, req.GetRef().GetNamespace(), filter)
	opts, minRV, err := s.listOptions(ctx, req, prefix)
	if err != nil {
		return nil, err
	}
	list := res.NewList()
	var items []runtime.Object
	read := func(ctx context.Context, o storage.ListOptions) (storage.ListResult, error) {
		return s.listPage(ctx, res, req, prefix, o)
	}
	at, err := s.scan(ctx, res, filter, opts, minRV, req.GetLimit(), 0, read, func(obj runtime.Object) error {
		items = append(items, obj)
		return nil
	})
	if err != nil {
		return nil, err
	}
	rev, next, remaining := at.rev, at.next, at.remaining
	if err := codec.SetListItems(list, items); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	lm.SetResourceVersion(strconv.FormatInt(rev, 10))
	if next != "" {
		tok, err := continuetoken.Encode(rev, next, prefix)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		lm.SetContinue(tok)
		lm.SetRemainingItemCount(remaining)
	}
	return list, nil
}

// expiredContinue is the 410 for a continue token whose revision has been
// compacted. Like kube-apiserver it carries a token that continues from the
// same key at the latest revision, for clients that accept an inconsistent
// list.
func expiredContinue(prefix, start string) error {
	err := apierrors.NewResourceExpired("The provided continue parameter is too old to display a consistent list result. " +
		"You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. " +
		"Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.")
	if tok, terr := continuetoken.Encode(continuetoken.Inconsistent, start, prefix); terr == nil {
		err.ErrStatus.ListMeta.Continue = tok
	}
	return err
}

// waitForRevision waits, bounded by ResourceVersionWait, until the store
// has reached revision minRV (0: no wait), then returns; past the bound it
// is kube-apiserver's 504 "Too large resource version".
func (s *Server) waitForRevision(ctx context.Context, minRV int64) error {
	if minRV <= 0 {
		return nil
	}
	deadline := time.Now().Add(s.cfg.ResourceVersionWait)
	for {
		rev, err := s.cfg.Store.Revision(ctx, true)
		if err != nil {
			return storageErrorNoResource(err)
		}
		if rev >= minRV {
			return nil
		}
		if time.Now().After(deadline) {
			return apistatus.TooLargeResourceVersion(minRV, rev)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// keyRange is the key prefix a read of res in namespace ns must scan: the
// collection's prefix, or — when a field selector pins metadata.name and
// the object's key is known — just that object's key, so that a list or
// watch of one object (kubectl's delete --wait, client-go's single-object
// informers) does not decode the whole collection. Keys that merely start
// with the name are dropped by the selector.
func keyRange(res *registry.Resource, ns string, f *selection.Filter) string {
	if name, ok := f.Name(); ok && (ns != "" || !res.Namespaced) {
		return res.Key(ns, name)
	}
	return res.KeyPrefix(ns)
}
