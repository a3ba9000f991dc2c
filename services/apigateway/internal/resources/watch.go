package resources

import (
	"context"
	"errors"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	"io"
	"strconv"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/watchframe"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/reqdeadline"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchinit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchpark"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// initialEventsEndAnnotation marks the bookmark that ends the initial
// events of a watch with sendInitialEvents=true.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// Watch streams the changes of a collection, in resourceVersion order:
//
//	resourceVersion unset   ADDED for the current state (consistent), then changes
//	resourceVersion "0"     ADDED for the state of the answering member, then changes
//	resourceVersion N       the changes after N; 410 Expired (as an ERROR event)
//	                        when N has been compacted
//
// sendInitialEvents=true sends the state as ADDED events and then a BOOKMARK
// annotated k8s.io/initial-events-end. The first message is empty: it makes
// the REST front end send the response headers before any event, as
// kube-apiserver does, so clients return from their Watch call at once.
//
// watchfanout serves the watch when it serves its format (relayWatch),
// moving it to another replica when its replica goes away; when no
// replica can, the store serves it (runWatch), from the start or from the
// last event watchfanout delivered. The watch lasts until the client's
// timeoutSeconds (or WatchTimeout) across those moves.
//
// Once its initial events are sent (at once for a watch without any) it
// calls watchinit.Sent, which gives the watch's flow-control seats back.
//
// A watch relayed from watchfanout with a watchpark.Handoff in its context
// parks while idle: Watch then returns watchpark.ErrParked, and the
// watch's end (what Watch would have returned) goes to the Handoff's End.
func (s *Server) Watch(req *apiv1.WatchRequest, stream apiv1.ResourceService_WatchServer) error {
	ctx := stream.Context()
	w, out, err := s.newWatch(ctx, req)
	if err != nil {
		return toGRPC(err)
	}
	timeout := s.cfg.WatchTimeout
	if t := req.GetTimeoutSeconds(); t > 0 && time.Duration(t)*time.Second < timeout {
		timeout = time.Duration(t) * time.Second
	}
	// The request's context ends at the deadline where the front end
	// supports it (h2conn's streams: no context of the watch's own for as
	// long as the watch lasts), else a context of the watch's own does.
	if deadline := time.Now().Add(timeout); !reqdeadline.Set(ctx, deadline) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		// A parked watch's timeout goes on until its end.
		defer watchpark.From(ctx).Defer(cancel)
	}

	if err := stream.Send(&httpbody.HttpBody{ContentType: w.contentType}); err != nil {
		return err
	}
	if enc, ok := cacheEncoding(out); ok && s.fromCache(w.res) {
		from, handled, parked, err := s.relayWatch(ctx, w, req, enc, stream)
		if parked {
			return watchpark.ErrParked
		}
		return s.afterRelay(ctx, w, stream, from, handled, err)
	}
	return w.end(ctx, stream, s.runWatch(ctx, w, req, stream))
}

// afterRelay ends a watch watchfanout served (relayWatch's results), or
// has the store go on with it: from its own request (w.request) when from
// is nil, else from from.
func (s *Server) afterRelay(ctx context.Context, w *watchState, stream apiv1.ResourceService_WatchServer, from *apiv1.WatchRequest, handled bool, err error) error {
	if handled {
		return w.end(ctx, stream, err)
	}
	if from == nil {
		return w.end(ctx, stream, s.runWatch(ctx, w, w.request(), stream))
	}
	// The store goes on with a watch watchfanout served so far.
	if w.start, err = parseWatch(from); err != nil {
		return w.end(ctx, stream, err)
	}
	return w.end(ctx, stream, s.runWatch(ctx, w, from, stream))
}

// end ends a watch that ended with err: quietly at its timeout, when the
// client went away or the stream ended; else with an ERROR event carrying
// err's Status (the headers are sent).
//
// Once the watch's context ctx has ended, whatever err is follows from
// that end (a store or watchfanout call cut by it fails with a gRPC code
// of its own, DeadlineExceeded or Canceled, not a context error), so the
// watch ends quietly, as kube-apiserver ends a watch at its timeout.
func (w *watchState) end(ctx context.Context, stream apiv1.ResourceService_WatchServer, err error) error {
	if err == nil || ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	st := apistatus.FromError(err)
	frame, ferr := w.frame(watch.Error, &st)
	if ferr != nil {
		return ferr
	}
	return stream.Send(&httpbody.HttpBody{ContentType: w.contentType, Data: frame})
}

// watchState is one watch's parameters, resolved, and, for a watch
// watchfanout serves, its relay: one record for as long as the watch
// lasts. It keeps of the watch's request only what the store needs to go
// on with the watch (request), not the request itself: a parked watch
// would hold the request's proto, and what parsing its query made, for
// its life.
type watchState struct {
	res         *registry.Resource
	filter      *selection.Filter
	start       readparams.WatchStart
	contentType string
	// format is the watch's framing; enc encodes in it, made at the first
	// frame the gateway encodes itself (a watch watchfanout serves is
	// relayed as encoded there, and needs it only for an ERROR event).
	format watchframe.Format
	enc    *watchframe.Encoder
	server *Server

	// What request rebuilds of the watch's request; sendInitialEvents
	// is the request's own (nil: not given), which nothing changes.
	namespace, resourceVersion, resourceVersionMatch string
	sendInitialEvents                                *bool
	allowWatchBookmarks                              bool

	relay relay
}

// request is the watch's request as the store path reads it (runWatch,
// parseWatch): its namespace and its resourceVersion parameters; the
// selectors are w's filter and key range already.
func (w *watchState) request() *apiv1.WatchRequest {
	return &apiv1.WatchRequest{
		Ref:             &apiv1.ResourceRef{Namespace: w.namespace},
		ResourceVersion: w.resourceVersion, ResourceVersionMatch: w.resourceVersionMatch,
		SendInitialEvents: w.sendInitialEvents, AllowWatchBookmarks: w.allowWatchBookmarks,
	}
}

// newWatch resolves req's parameters; out is its negotiated output, which
// w carries as its format.
func (s *Server) newWatch(ctx context.Context, req *apiv1.WatchRequest) (w *watchState, out output, _ error) {
	res, err := s.resolve(ctx, req.GetRef(), false)
	if err != nil {
		return nil, output{}, err
	}
	fieldSel := req.GetFieldSelector()
	if name := req.GetRef().GetName(); name != "" {
		// A watch on one object is a watch on its collection, pinned by name.
		if fieldSel != "" {
			fieldSel += ","
		}
		fieldSel += "metadata.name=" + name
	}
	f, err := selection.New(res, req.GetLabelSelector(), fieldSel)
	if err != nil {
		return nil, output{}, err
	}
	out, err = negotiateOutput(req.GetAccept(), req.GetIncludeObject(), served(res, negotiation.Watches))
	if err != nil {
		return nil, output{}, err
	}
	start, err := parseWatch(req)
	if err != nil {
		return nil, output{}, err
	}
	format := watchframe.Format{MediaType: out.mediaType, Table: out.table, Partial: out.partial, IncludeObject: out.includeObject}
	return &watchState{
		res: res, filter: f, start: start,
		contentType: format.ContentType(), format: format, server: s,
		namespace: req.GetRef().GetNamespace(), resourceVersion: req.GetResourceVersion(),
		resourceVersionMatch: req.GetResourceVersionMatch(), sendInitialEvents: req.SendInitialEvents,
		allowWatchBookmarks: req.GetAllowWatchBookmarks(),
	}, out, nil
}

// parseWatch resolves a watch's resourceVersion parameters
// (readparams.Watch). The gateway serves resourceVersionMatch=NotOlderThan
// only with sendInitialEvents=true: its store path (runWatch) starts a
// watch without initial events only after a given revision N, and has no
// start for resourceVersion unset or "0" then.
func parseWatch(req *apiv1.WatchRequest) (readparams.WatchStart, error) {
	if req.GetResourceVersionMatch() == string(metav1.ResourceVersionMatchNotOlderThan) && !req.GetSendInitialEvents() {
		// An invalid resourceVersion is reported first.
		if _, err := readparams.Get(req.GetResourceVersion()); err != nil {
			return readparams.WatchStart{}, err
		}
		return readparams.WatchStart{}, apierrors.NewBadRequest("resourceVersionMatch NotOlderThan is only supported for watch with sendInitialEvents=true")
	}
	return readparams.Watch(readparams.WatchQuery{
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		SendInitialEvents: req.SendInitialEvents, AllowWatchBookmarks: req.GetAllowWatchBookmarks(),
	})
}

func (s *Server) runWatch(ctx context.Context, w *watchState, req *apiv1.WatchRequest, stream apiv1.ResourceService_WatchServer) error {
	// The watch's key range, made here: a relayed watch needs none.
	prefix := keyRange(w.res, w.namespace, w.filter)
	rv := w.start.Revision // 0 for MostRecent and Any
	after := rv
	if w.start.Initial {
		if err := s.waitForRevision(ctx, rv); err != nil {
			return err
		}
		opts := storage.ListOptions{}
		if req.GetSendInitialEvents() || w.start.Semantic == readparams.Any {
			opts.Serializable = true
		}
		var frames []byte
		read := func(ctx context.Context, o storage.ListOptions) (storage.ListResult, error) {
			page, err := s.cfg.Store.List(ctx, prefix, o)
			if err != nil {
				return page, storageError(err, w.res, req.GetRef().GetNamespace(), "")
			}
			return page, nil
		}
		at, err := s.scan(ctx, w.res, w.filter, opts, rv, 0, 0, read, func(obj runtime.Object) error {
			f, err := w.frame(watch.Added, obj)
			frames = append(frames, f...)
			return err
		})
		if err != nil {
			return err
		}
		after = at.rev
		if req.GetSendInitialEvents() {
			f, err := w.bookmark(after, true)
			if err != nil {
				return err
			}
			frames = append(frames, f...)
		}
		if len(frames) > 0 {
			if err := stream.Send(&httpbody.HttpBody{ContentType: w.contentType, Data: frames}); err != nil {
				return err
			}
		}
	}

	watcher, err := s.cfg.Store.Watch(ctx, prefix, after+1, req.GetAllowWatchBookmarks())
	if err != nil {
		return storageError(err, w.res, req.GetRef().GetNamespace(), "")
	}
	defer watcher.Close()
	// The initial events (if any) are sent and the watch is established:
	// its flow-control seats go back.
	watchinit.Sent(ctx)
	for {
		batch, err := watcher.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return storageError(err, w.res, req.GetRef().GetNamespace(), "")
		}
		var frames []byte
		if batch.Progress {
			if !req.GetAllowWatchBookmarks() {
				continue
			}
			if frames, err = w.bookmark(batch.Revision, false); err != nil {
				return err
			}
		}
		for _, ev := range batch.Events {
			f, err := w.eventFrame(ctx, ev)
			if err != nil {
				return err
			}
			frames = append(frames, f...)
		}
		if len(frames) == 0 {
			continue
		}
		if err := stream.Send(&httpbody.HttpBody{ContentType: w.contentType, Data: frames}); err != nil {
			return err
		}
	}
}

// eventFrame turns a store event into the watch event a client of this
// watch sees, if any: an object entering the selectors is ADDED, one
// leaving them DELETED with its previous state at the event's revision,
// as kube-apiserver reports it (the client saw that state last, and its
// new one is not the watch's to show). The watch's key range holds its
// namespace only.
func (w *watchState) eventFrame(ctx context.Context, ev storage.Event) ([]byte, error) {
	if ev.Err != nil {
		// A state of the object does not decrypt: the watch cannot say
		// what changed, and ends with the reason, as kube-apiserver's.
		return nil, apierrors.NewInternalError(ev.Err)
	}
	var cur, prev runtime.Object
	if ev.Type == storage.Put {
		var err error
		if cur, err = w.server.decodeRead(ctx, w.res, ev.KV.Value, ev.KV.ModRevision); err != nil {
			return nil, err
		}
	}
	if len(ev.PrevKV.Value) > 0 {
		// A deleted object is reported at the revision of its deletion.
		var err error
		if prev, err = w.server.decodeStored(ctx, w.res, ev.PrevKV.Value, ev.KV.ModRevision); err != nil {
			return nil, err
		}
	}
	curMatch := cur != nil && w.filter.Matches(cur)
	prevMatch := prev != nil && w.filter.Matches(prev)
	switch {
	case curMatch && prevMatch:
		return w.frame(watch.Modified, cur)
	case curMatch:
		return w.frame(watch.Added, cur)
	case prevMatch:
		return w.frame(watch.Deleted, prev)
	}
	return nil, nil
}

// bookmark encodes a BOOKMARK event carrying only a resourceVersion.
func (w *watchState) bookmark(rev int64, initialEnd bool) ([]byte, error) {
	obj := w.res.New()
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	acc.SetResourceVersion(strconv.FormatInt(rev, 10))
	if initialEnd {
		acc.SetAnnotations(map[string]string{initialEventsEndAnnotation: "true"})
	}
	return w.frame(watch.Bookmark, obj)
}

// frame encodes one watch event in the watch's format.
func (w *watchState) frame(t watch.EventType, obj runtime.Object) ([]byte, error) {
	if w.enc == nil {
		w.enc = watchframe.NewEncoder(w.server.cfg.Codec, w.res, w.format, w.server.cfg.Now)
	}
	data, err := w.enc.Frame(t, obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return data, nil
}
