package resources

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Get reads one object (readparams.Get): from watchfanout when it serves
// the encoding and the read (cachedGet: with a resourceVersion, or
// consistent when watchfanout runs in this process); else from the store
// (storeRead), where MostRecent is a linearizable read, Any the answering
// member's state and NotOlderThan N that state once it has reached N.
func (s *Server) Get(ctx context.Context, req *apiv1.GetRequest) (*httpbody.HttpBody, error) {
	res, err := s.resolve(ctx, req.GetRef(), true)
	if err != nil {
		return nil, toGRPC(err)
	}
	out, err := negotiateOutput(req.GetAccept(), req.GetIncludeObject(), served(res, negotiation.Reads))
	if err != nil {
		return nil, toGRPC(err)
	}
	if isScale(res, req.GetRef()) {
		sc, err := s.getScale(ctx, res, req.GetRef(), out)
		if err != nil {
			return nil, toGRPC(err)
		}
		return toGRPCBody(s.respond(sc, out.mediaType))
	}
	rd, err := readparams.Get(req.GetResourceVersion())
	if err != nil {
		return nil, toGRPC(err)
	}
	if body, handled, err := s.cachedGet(ctx, res, req, out); handled {
		return body, toGRPC(err)
	}
	opts, minRV := storeRead(rd)
	obj, _, err := s.get(ctx, res, req.GetRef().GetNamespace(), req.GetRef().GetName(), opts.ReadOptions, minRV)
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
	obj, err := s.decodeRead(ctx, res, kv.Value, kv.ModRevision)
	if err != nil {
		return nil, 0, err
	}
	return obj, rev, nil
}

// storeRead is the store read of r and the revision the store must reach
// before it (NotOlderThan; 0: none). MostRecent and ContinueInconsistent
// read the current state linearizably; the others read the answering
// store member's state, at a revision for Exact and Continue.
func storeRead(r readparams.Read) (opts storage.ListOptions, minRV int64) {
	opts.Limit, opts.Start = r.Limit, r.Start
	switch r.Semantic {
	case readparams.Any:
		opts.Serializable = true
	case readparams.NotOlderThan:
		opts.Serializable, minRV = true, r.Revision
	case readparams.Exact, readparams.Continue:
		opts.Revision, opts.Serializable = r.Revision, true
	}
	return opts, minRV
}

// listQuery is a list request's read parameters.
func listQuery(req *apiv1.ListRequest) readparams.ListQuery {
	return readparams.ListQuery{
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Continue: req.GetContinueToken(), Limit: req.GetLimit(),
	}
}

// List reads a collection, filtered by selectors, optionally in chunks;
// readparams.List resolves its read parameters. Lists watchfanout can
// serve go there (cachedList; JSON relayed as watchfanout streams it).
// From the store, JSON lists stream (see streamList); protobuf lists are
// spliced from the stored bytes (see spliceList) unless a selector needs a
// kind's own fields; other encodings, Tables and metadata-only lists are
// built whole and sent as one message.
func (s *Server) List(req *apiv1.ListRequest, stream apiv1.ResourceService_ListServer) error {
	ctx := stream.Context()
	res, err := s.resolve(ctx, req.GetRef(), false)
	if err != nil {
		return toGRPC(err)
	}
	out, err := negotiateOutput(req.GetAccept(), req.GetIncludeObject(), served(res, negotiation.Reads))
	if err != nil {
		return toGRPC(err)
	}
	filter, err := selection.New(res, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return toGRPC(err)
	}
	rd, err := readparams.List(listQuery(req), keyRange(res, req.GetRef().GetNamespace(), filter))
	if err != nil {
		return toGRPC(err)
	}
	return toGRPC(s.withListBudget(res, req, out.shape(), stream, func(stream apiv1.ResourceService_ListServer) error {
		return s.serveList(ctx, res, req, out, rd, filter, stream)
	}))
}

// serveList serves a list whose parameters List has resolved, from
// watchfanout or the store.
func (s *Server) serveList(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, out output, rd readparams.Read, filter *selection.Filter, stream apiv1.ResourceService_ListServer) error {
	if handled, err := s.cachedList(ctx, res, req, out, stream); handled {
		return err
	}
	if out.mediaType == negotiation.JSON && !out.table && !out.partial {
		return s.streamList(ctx, res, req, rd, filter, stream)
	}
	if spliceable(out, filter) {
		if handled, err := s.spliceList(ctx, res, req, rd, filter, stream); handled {
			return err
		}
	}
	list, err := s.list(ctx, res, req, rd, filter)
	if err != nil {
		return err
	}
	body, err := s.respondAs(res, list, out)
	if err != nil {
		return err
	}
	return stream.Send(body)
}

// listOptions is the store read of a list's first page (storeRead),
// once the store has reached a NotOlderThan revision. minRV is that
// revision (0: none).
func (s *Server) listOptions(ctx context.Context, rd readparams.Read) (opts storage.ListOptions, minRV int64, err error) {
	opts, minRV = storeRead(rd)
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

func (s *Server) list(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, rd readparams.Read, filter *selection.Filter) (runtime.Object, error) {
	prefix := keyRange(res, req.GetRef().GetNamespace(), filter)
	opts, minRV, err := s.listOptions(ctx, rd)
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

// revisionPollInterval is how often waitForRevision reads the store's
// revision: short against ResourceVersionWait, each poll one serializable
// Range that reads no key.
const revisionPollInterval = 50 * time.Millisecond

// waitForRevision waits, bounded by ResourceVersionWait, until the store
// member that answers has reached revision minRV (0: no wait), then
// returns; past the bound it is kube-apiserver's 504 "Too large resource
// version". It is the NotOlderThan wait of reads served from the store.
// The store has no call that blocks until a revision is applied (a Range
// at a future revision fails at once; a watch reports progress only on a
// period or on request), so it polls.
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
		case <-time.After(revisionPollInterval):
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
