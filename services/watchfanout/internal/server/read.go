package server

import (
	"bytes"
	"context"
	"strconv"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/continuetoken"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	"github.com/meridian-cp/meridian/lib/kube/table"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Get reads one object from the cache (readparams.Get):
//
//	resourceVersion unset  MostRecent: the cache reaches the store's current revision first
//	"0"                    Any: the cache as it is
//	N                      NotOlderThan N: wait, then 504 ResourceVersionTooLarge
func (s *Server) Get(ctx context.Context, req *watchv1.GetRequest) (*watchv1.GetResponse, error) {
	r, err := s.resolve(ctx, req.GetResource())
	if err != nil {
		return nil, toGRPC(err)
	}
	f, err := formatOf(r, req.GetEncoding(), req.GetIncludeObject())
	if err != nil {
		return nil, toGRPC(err)
	}
	rd, err := readparams.Get(req.GetResourceVersion())
	if err != nil {
		return nil, toGRPC(err)
	}
	if err := s.waitRead(ctx, rd); err != nil {
		return nil, toGRPC(err)
	}
	if r, err = s.current(r); err != nil {
		return nil, toGRPC(err)
	}
	ns := req.GetNamespace()
	if !r.Registry().Namespaced {
		ns = ""
	}
	ev, _ := r.Get(r.Registry().Key(ns, req.GetName()))
	if ev == nil {
		return nil, toGRPC(apierrors.NewNotFound(r.Registry().GVR.GroupResource(), req.GetName()))
	}
	evRV := strconv.FormatInt(ev.Rev, 10)
	if f == cache.FormatProtobuf {
		// From the stored bytes: what decoding and encoding give,
		// without either.
		if data, ok := ev.Envelope(); ok {
			return &watchv1.GetResponse{Data: data, ResourceVersion: evRV}, nil
		}
	}
	if f == cache.FormatJSON {
		// The object's memoized JSON (what a list of it holds).
		x, err := ev.ObjectJSON()
		if err != nil {
			return nil, toGRPC(apierrors.NewInternalError(err))
		}
		data := make([]byte, 0, len(x)+1)
		return &watchv1.GetResponse{Data: append(append(data, x...), '\n'), ResourceVersion: evRV}, nil
	}
	obj, err := ev.Object()
	if err != nil {
		return nil, toGRPC(apierrors.NewInternalError(err))
	}
	data, err := s.encode(r.Registry(), obj, f)
	if err != nil {
		return nil, toGRPC(err)
	}
	return &watchv1.GetResponse{Data: data, ResourceVersion: evRV}, nil
}

// waitRead waits until the cache holds the state rd asks for: the store's
// current revision (MostRecent) or rd.Revision (NotOlderThan).
func (s *Server) waitRead(ctx context.Context, rd readparams.Read) error {
	switch rd.Semantic {
	case readparams.MostRecent:
		_, err := s.waitConsistent(ctx)
		return err
	case readparams.NotOlderThan:
		return s.waitNotOlder(ctx, rd.Revision)
	}
	return nil
}

// List reads a collection from the cache, with the rules of Get plus:
// resourceVersionMatch=Exact reads a kept snapshot at exactly N (or the
// store at N); limit cuts the list into chunks read from one snapshot, and
// continue_token continues it (from the store at the token's revision once
// the snapshot expired; 410 Expired once the store compacted it).
func (s *Server) List(ctx context.Context, req *watchv1.ListRequest) (*watchv1.ListResponse, error) {
	resp, err := s.list(ctx, req)
	return resp, toGRPC(err)
}

func (s *Server) list(ctx context.Context, req *watchv1.ListRequest) (*watchv1.ListResponse, error) {
	l, err := s.read(ctx, req)
	if err != nil {
		return nil, err
	}
	data, err := s.encodeList(l.res, &l.page, &l.lm, l.f)
	if err != nil {
		return nil, err
	}
	return &watchv1.ListResponse{Data: data, ResourceVersion: l.lm.ResourceVersion, ContinueToken: l.lm.Continue, RemainingItemCount: l.lm.RemainingItemCount}, nil
}

// listed is a list read and not yet encoded: the page, the list's
// metadata and the format asked for.
type listed struct {
	res  *registry.Resource
	page listPage
	lm   metav1.ListMeta
	f    cache.Format
}

// read reads the page a list request asks for, with its metadata.
func (s *Server) read(ctx context.Context, req *watchv1.ListRequest) (*listed, error) {
	r, err := s.resolve(ctx, req.GetResource())
	if err != nil {
		return nil, err
	}
	f, err := formatOf(r, req.GetEncoding(), req.GetIncludeObject())
	if err != nil {
		return nil, err
	}
	flt, err := filter(r, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		return nil, err
	}
	res := r.Registry()
	ns := req.GetNamespace()
	if !res.Namespaced {
		ns = ""
	}
	prefix := res.KeyPrefix(ns)
	rd, err := readparams.List(readparams.ListQuery{
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Continue: req.GetContinueToken(), Limit: req.GetLimit(),
	}, prefix)
	if err != nil {
		return nil, err
	}
	var snap *cache.Snapshot
	exact := int64(0) // a revision to read from the store when no snapshot has it
	switch rd.Semantic {
	case readparams.ContinueInconsistent:
		// The continuation a 410 for an expired token offers reads the
		// current state.
		snap = r.Snapshot(ns)
	case readparams.Continue:
		if snap, _ = r.Kept(ns, rd.Revision); snap == nil {
			exact = rd.Revision
		} else if err := s.notCompacted(ctx, prefix, rd.Revision); err != nil {
			return nil, err
		}
	case readparams.Exact:
		if snap, _ = r.Kept(ns, rd.Revision); snap == nil {
			exact = rd.Revision
		}
	default:
		if err := s.waitRead(ctx, rd); err != nil {
			return nil, err
		}
		if r, err = s.current(r); err != nil {
			return nil, err
		}
		res = r.Registry()
		snap = r.Snapshot(ns)
	}

	start := rd.Start
	var page listPage
	if snap != nil {
		page = listSnapshot(snap, start, rd.Limit, flt)
		if page.next != "" {
			r.Keep(snap)
		}
	} else {
		if start == "" {
			start = prefix
		}
		if page, err = s.listStore(ctx, r, prefix, start, exact, rd.Limit, flt); err != nil {
			return nil, err
		}
	}
	l := &listed{res: res, page: page, f: f, lm: metav1.ListMeta{ResourceVersion: strconv.FormatInt(page.rev, 10)}}
	if page.next != "" {
		if l.lm.Continue, err = continuetoken.Encode(page.rev, page.next, prefix); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		l.lm.RemainingItemCount = page.remaining
	}
	return l, nil
}

// listChunkBytes is the size of the chunks a spliced list is gathered in.
const listChunkBytes = 64 << 10

// encodeList writes a page as a list with metadata lm in format f: in
// protobuf, spliced from the stored bytes of the cache's objects (byte
// for byte the decoded list encoded; package protolist); in JSON, from
// each object's memoized JSON (appendJSONList); else decoded.
func (s *Server) encodeList(res *registry.Resource, page *listPage, lm *metav1.ListMeta, f cache.Format) ([]byte, error) {
	if f == cache.FormatJSON && page.items == nil {
		return s.appendJSONList(nil, res, page.evs, lm, 0, nil)
	}
	if f == cache.FormatProtobuf && page.items == nil {
		if chunks, ok, err := protobufListChunks(res, page, lm, listChunkBytes); ok || err != nil {
			return bytes.Join(chunks, nil), err
		}
	}
	items := page.items
	if items == nil {
		items = make([]runtime.Object, 0, len(page.evs))
		for _, ev := range page.evs {
			obj, err := ev.Object()
			if err != nil {
				return nil, apierrors.NewInternalError(err)
			}
			items = append(items, obj)
		}
	}
	list := res.NewList()
	if err := codec.SetListItems(list, items); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	la, err := meta.ListAccessor(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	la.SetResourceVersion(lm.ResourceVersion)
	la.SetContinue(lm.Continue)
	la.SetRemainingItemCount(lm.RemainingItemCount)
	return s.encode(res, list, f)
}

// protobufListChunks writes a page as a protobuf list with metadata lm,
// spliced from the stored bytes of the cache's objects (package
// protolist), in order: a head, then items gathered into chunks of about
// chunkSize bytes. ok is false when an object has no stored bytes to
// splice (the list must be encoded from the decoded objects).
func protobufListChunks(res *registry.Resource, page *listPage, lm *metav1.ListMeta, chunkSize int) (chunks [][]byte, ok bool, err error) {
	w := protolist.NewWriter(res.GVK().GroupVersion().WithKind(res.ListKind), chunkSize)
	for _, ev := range page.evs {
		po, ok := ev.Stored()
		if !ok {
			return nil, false, nil
		}
		w.Add(po, ev.Rev)
	}
	if chunks, err = w.Finish(lm); err != nil {
		return nil, false, apierrors.NewInternalError(err)
	}
	return chunks, true, nil
}

// listPage is one chunk of a list: the cache's events (a snapshot's) or
// objects decoded from the store.
type listPage struct {
	evs       []*cache.Event
	items     []runtime.Object
	rev       int64
	next      string // the key to continue from; "" when complete
	remaining *int64 // without selectors: the items after this chunk
}

// listSnapshot reads up to limit (0: all) selected items from key start.
// Without selectors a chunk reports the items after it (remaining): from
// the count the chunk before recorded for start when there is one (then
// it reads only its own items), else by walking the rest; it records the
// count for the chunk after it, and after walking the rest the count from
// start too, so that the first chunk of the next list of the same state
// (whose start no chunk before recorded) reads only its own items.
func listSnapshot(snap *cache.Snapshot, start string, limit int64, flt *selection.Filter) listPage {
	p := listPage{rev: snap.Rev}
	var rest int64
	counted, known := int64(0), false
	if flt.Empty() && limit > 0 {
		counted, known = snap.CountFrom(start)
	}
	ascend := snap.Ascend
	if name, ok := flt.Name(); ok {
		ascend = func(from string, fn func(*cache.Event) bool) { snap.AscendNamed(from, name, fn) }
	}
	ascend(start, func(ev *cache.Event) bool {
		if p.next != "" {
			if !flt.Empty() {
				return false
			}
			rest++
			return true
		}
		if !ev.Matches(flt) {
			return true
		}
		if limit > 0 && int64(len(p.evs)) == limit {
			p.next = ev.Key
			if known {
				rest = counted - limit
				return false
			}
			rest = 1
			return true
		}
		p.evs = append(p.evs, ev)
		return true
	})
	if p.next != "" && flt.Empty() {
		p.remaining = &rest
		snap.NoteCountFrom(p.next, rest)
		if !known {
			snap.NoteCountFrom(start, int64(len(p.evs))+rest)
		}
	}
	return p
}

// encode writes obj (an object or a list) in format f.
func (s *Server) encode(res *registry.Resource, obj runtime.Object, f cache.Format) ([]byte, error) {
	var include metav1.IncludeObjectPolicy
	switch f {
	case cache.FormatTableNone:
		include = metav1.IncludeNone
	case cache.FormatTableMetadata:
		include = metav1.IncludeMetadata
	case cache.FormatTableObject:
		include = metav1.IncludeObject
	default:
		data, err := s.cfg.Codec.EncodeToBytes(obj, mediaType(f))
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		return data, nil
	}
	t, err := table.Render(s.cfg.Codec, res, obj, include, s.cfg.Now())
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	data, err := s.cfg.Codec.EncodeToBytes(t, negotiation.JSON)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return data, nil
}
