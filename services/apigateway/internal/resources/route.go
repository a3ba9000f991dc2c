package resources

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchfanoutclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchinit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchpark"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file routes watches and cached reads to watchfanout, which encodes
// each event once for all watchers (docs/architecture.md, "Where a read is
// served"):
//
//	watch (any resourceVersion)              → watchfanout
//	get/list resourceVersion="0" (Any)       → watchfanout
//	get/list resourceVersion=N, NotOlderThan → watchfanout (it waits for N)
//	list unset (consistent)                  → watchfanout (it waits for the store's revision)
//	list continue                            → watchfanout (the first chunk's snapshot; 410 → store)
//	get unset, Exact                         → store
//
// Formats watchfanout does not encode (YAML, PartialObjectMetadata) are
// served from the store. When watchfanout cannot be reached (UNAVAILABLE,
// UNIMPLEMENTED), the request is served from the store instead: losing
// watchfanout costs speed, never correctness.

// cacheEncoding maps a negotiated output to watchfanout's encoding.
func cacheEncoding(out output) (watchv1.Encoding, bool) {
	switch {
	case out.partial:
		return 0, false
	case out.table:
		return watchv1.Encoding_ENCODING_TABLE, true
	case out.mediaType == negotiation.JSON:
		return watchv1.Encoding_ENCODING_JSON, true
	case out.mediaType == negotiation.Protobuf:
		return watchv1.Encoding_ENCODING_PROTOBUF, true
	}
	return 0, false
}

// fallBack reports whether a failed call to watchfanout should be served
// from the store instead: watchfanout cannot be reached, or its reply
// would exceed gRPC's message limit (the store's reads fall back to
// smaller pages).
func fallBack(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Unimplemented, codes.ResourceExhausted:
		return true
	}
	return false
}

// cacheResource is res as watchfanout's requests name it, one per served
// resource version: every get, list and watch sent there shares it (a
// watch keeps its request for its moves to other replicas), and nothing
// changes it.
func (s *Server) cacheResource(res *registry.Resource) *watchv1.Resource {
	if r, ok := s.cacheResources.Load(res.GVR); ok {
		return r.(*watchv1.Resource)
	}
	r, _ := s.cacheResources.LoadOrStore(res.GVR, &watchv1.Resource{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource})
	return r.(*watchv1.Resource)
}

// cacheable reports whether a read's resourceVersion parameters are served
// by watchfanout. A consistent read (resourceVersion unset) is served there
// only when consistentOK is true. A continue token is: watchfanout serves
// the next chunk from the snapshot the first was read from, while it keeps
// it and the store has not compacted its revision (else from the store at
// that revision, as the gateway would).
func cacheable(rv, match string, consistentOK bool) bool {
	return (rv != "" || consistentOK) && match != string(metav1.ResourceVersionMatchExact)
}

// lagged reports whether watchfanout gave up on a consistent read because it
// could not reach the store's current revision in time (504), while the
// caller still waits: the store can still answer. kube-apiserver falls
// back to etcd the same way when its watch cache lags a consistent list.
func lagged(ctx context.Context, err error) bool {
	return status.Code(err) == codes.DeadlineExceeded && ctx.Err() == nil
}

// relayWatch serves a watch from watchfanout, relaying its pre-encoded
// frames untouched. The response headers have been sent.
//
// The watch goes on across replicas (watchfanoutclient.Watch): when the
// replica serving it goes away, drains, or cannot serve its
// resourceVersion, it resumes on another from the resourceVersion of the
// last event delivered, and the client sees no gap, no duplicate and no
// error. When no replica can serve it, handled is false and from is the
// request the store serves the rest of the watch with: the original one
// (nil) when nothing was delivered yet, else the changes after the last
// event delivered. A watch whose initial events were cut short ends with
// a 410 Expired, as the client must list again. err is what the watch
// ended with (nil, the client's context's error, or one to report as an
// ERROR event).
//
// A watch whose context carries a watchpark.Handoff (an HTTP/2 stream
// that can outlive its handler) parks whenever it has nothing to send:
// parked is true and the rest of the watch is the relay's (relay.resume).
// Otherwise the watch waits in ws.Recv on the request's goroutine for as
// long as it lasts, so the stack under it is kept short (see the front
// end's Handler.serve): opening the watch (openRelay) and sorting out how
// it ended (relayEnded) are functions of their own.
func (s *Server) relayWatch(ctx context.Context, w *watchState, req *apiv1.WatchRequest, enc watchv1.Encoding, stream apiv1.ResourceService_WatchServer) (from *apiv1.WatchRequest, handled, parked bool, err error) {
	r := &w.relay
	r.w, r.ctx, r.stream = w, ctx, stream
	var park func(watchpark.Parker) bool
	if r.park = watchpark.From(ctx); r.park != nil {
		park = r.tryPark
	}
	r.ws = s.openRelay(ctx, w, req, enc)
	return r.run(park)
}

// relay is a watch relayed from watchfanout (relayWatch): what it needs
// to go on after it parked. It is part of the watch's watchState, so that
// a parked watch's state is one record.
type relay struct {
	w      *watchState
	ctx    context.Context
	ws     *watchfanoutclient.Watch
	stream apiv1.ResourceService_WatchServer
	// park is set when the watch may park (tryPark), to go on in
	// resume; resumeFn is resume as a func, made at the first park.
	park     *watchpark.Handoff
	resumeFn func()
	sent     bool // watchinit.Sent was called
}

// tryPark parks the watch on p (watchfanoutclient.Watch.RecvOrPark), to
// go on in resume.
func (r *relay) tryPark(p watchpark.Parker) bool {
	if r.resumeFn == nil {
		r.resumeFn = r.resume
	}
	return r.park.Park(p, r.resumeFn)
}

// run relays the watch's messages until it ends (relayWatch's results;
// ws is closed) or it parks (parked; nothing of r is touched after). park
// is tryPark when the watch may park, else nil.
func (r *relay) run(park func(watchpark.Parker) bool) (from *apiv1.WatchRequest, handled, parked bool, err error) {
	for {
		if !r.sent && r.ws.InitialEventsDelivered() {
			// Sent too: the stream's Send below returned.
			watchinit.Sent(r.ctx)
			r.sent = true
		}
		msg, parked, err := r.ws.RecvOrPark(park)
		if parked {
			return nil, false, true, nil
		}
		if err != nil {
			from, handled, err := r.w.server.relayEnded(r.ctx, r.w, r.ws, err)
			r.ws.Close()
			return from, handled, false, err
		}
		if err := r.stream.Send(&httpbody.HttpBody{ContentType: r.w.contentType, Data: msg.GetFrames()}); err != nil {
			r.ws.Close()
			return nil, true, false, err
		}
	}
}

// resume goes on with a parked watch, on the goroutine of its wake-up:
// until it parks again, or to its end, which it reports to the Handoff
// (what Watch would have returned).
func (r *relay) resume() {
	from, handled, parked, err := r.run(r.tryPark)
	if parked {
		return
	}
	r.park.End(r.w.server.afterRelay(r.ctx, r.w, r.stream, from, handled, err))
}

// openRelay returns the watchfanout watch relayWatch relays, of req's
// parameters in encoding enc, as the caller's user (ctx's, which the pool
// sends along where a replica serves the watch on a stream of its own).
func (s *Server) openRelay(ctx context.Context, w *watchState, req *apiv1.WatchRequest, enc watchv1.Encoding) *watchfanoutclient.Watch {
	fieldSel := req.GetFieldSelector()
	if name := req.GetRef().GetName(); name != "" {
		if fieldSel != "" {
			fieldSel += ","
		}
		fieldSel += "metadata.name=" + name
	}
	return s.cfg.Watchfanout.Watch(ctx, &watchv1.WatchRequest{
		Resource:             s.cacheResource(w.res),
		Namespace:            req.GetRef().GetNamespace(),
		LabelSelector:        req.GetLabelSelector(),
		FieldSelector:        fieldSel,
		ResourceVersion:      req.GetResourceVersion(),
		ResourceVersionMatch: req.GetResourceVersionMatch(),
		SendInitialEvents:    req.SendInitialEvents,
		AllowBookmarks:       req.GetAllowWatchBookmarks(),
		TimeoutSeconds:       req.GetTimeoutSeconds(),
		Encoding:             enc,
		IncludeObject:        req.GetIncludeObject(),
	}, w.movedReplica)
}

// movedReplica counts a relayed watch's move to another replica.
func (w *watchState) movedReplica() { w.server.m.watchResumed(w.res.GVR.Resource, resumedOnReplica) }

// relayEnded is what relayWatch returns once ws.Recv returned err; from
// nil with handled false is the watch's own request (w.request).
func (s *Server) relayEnded(ctx context.Context, w *watchState, ws *watchfanoutclient.Watch, err error) (from *apiv1.WatchRequest, handled bool, _ error) {
	resource := w.res.GVR.Resource
	switch {
	case errors.Is(err, io.EOF) || ctx.Err() != nil:
		return nil, true, nil
	case errors.Is(err, watchfanoutclient.ErrNoReplica):
		if w.res.Custom != nil && ws.Served() {
			// A replica served the watch and none goes on with it:
			// for a custom resource that is, first of all, its CRD
			// deleted or changed (each replica ends the watches of
			// the resources it drops). The watch ends, as
			// kube-apiserver ends a CRD's watches then; the client
			// re-watches from its last resourceVersion (404 once
			// the CRD is gone).
			return nil, true, nil
		}
		if ws.Served() {
			s.m.watchResumed(resource, resumedOnStore)
		}
		if rv, ok := ws.ResumeFrom(); ok {
			return resumeRequest(w.request(), rv), false, nil
		}
		return nil, false, nil
	case errors.Is(err, watchfanoutclient.ErrInitialEventsCut):
		s.m.watchResumed(resource, resumeExpired)
		return nil, true, apierrors.NewResourceExpired("the watch cache replica serving the initial events went away before it had sent them all: list again")
	default:
		return nil, true, err
	}
}

// resumeRequest is req going on after resourceVersion rv: the changes
// after it, without initial events.
func resumeRequest(req *apiv1.WatchRequest, rv string) *apiv1.WatchRequest {
	req.ResourceVersion, req.ResourceVersionMatch, req.SendInitialEvents = rv, "", nil
	return req
}

// fromCache reports whether watchfanout serves res's reads and watches:
// every resource, built-in or custom, when there is watchfanout. Each
// replica follows the CRDs in its own store watch and serves a CRD's
// versions from the revision that established it; one asked about a
// resource it does not serve yet first catches up with the store, so a
// custom resource this gateway serves is not answered 404 by a replica
// that lags. Custom resources reach the client with their schema's
// defaults applied once, where the stored object is decoded: by
// watchfanout for what it serves (its frames are relayed untouched), by
// decodeRead for what the store serves. A version that a conversion
// webhook converts to is served from the store (conversion.go): the tier
// holds objects as stored and converts by strategy None only.
func (s *Server) fromCache(res *registry.Resource) bool {
	if needsConversion(res) && crdconvert.NeedsWebhook(res.Custom.CRD) {
		return false
	}
	return s.cfg.Watchfanout != nil
}

// cachedGet serves a get from watchfanout. handled is false when the store
// must serve it.
//
// A consistent get (resourceVersion unset) goes there only when the
// replicas' Gets run in this process (the all-in-one): watchfanout reads
// the store's current revision linearizably (in process too, one read
// shared by concurrent callers), waits until its cache has applied it and
// answers from the object's memoized encoding, the rule consistent lists
// follow (cachedList), with the same fallback: the store serves the get
// when watchfanout could not reach that revision in time (504) or cannot
// be reached. Over a connection, the hop to watchfanout and its revision
// read cost more than the store's read of one key.
func (s *Server) cachedGet(ctx context.Context, res *registry.Resource, req *apiv1.GetRequest, out output) (*httpbody.HttpBody, bool, error) {
	enc, ok := cacheEncoding(out)
	if !ok || !s.fromCache(res) || !cacheable(req.GetResourceVersion(), "", s.cfg.Watchfanout.GetsInProcess()) {
		return nil, false, nil
	}
	consistent := req.GetResourceVersion() == ""
	resp, err := s.cfg.Watchfanout.Client().Get(identity.AppendToOutgoing(ctx, user(ctx)), &watchv1.GetRequest{
		Resource: s.cacheResource(res), Namespace: req.GetRef().GetNamespace(), Name: req.GetRef().GetName(),
		ResourceVersion: req.GetResourceVersion(), Encoding: enc, IncludeObject: req.GetIncludeObject(),
	})
	if err != nil {
		// A 404 is watchfanout's answer, as an object is.
		served := apistatus.FromError(err).Code == http.StatusNotFound
		fallback := !served && (fallBack(err) || (consistent && lagged(ctx, err)))
		if consistent {
			s.m.consistentRead(res.GVR.Resource, served, fallback)
		}
		if fallback {
			return nil, false, nil
		}
		return nil, true, err
	}
	if consistent {
		s.m.consistentRead(res.GVR.Resource, true, false)
	}
	return &httpbody.HttpBody{ContentType: out.mediaType, Data: resp.GetData()}, true, nil
}

// cachedList serves a list from watchfanout. handled is false when the
// store must serve it.
//
// A consistent list in an encoding watchfanout serves goes there: it
// reads the store's current revision linearizably (one read shared by
// concurrent callers), waits until its cache has applied it, and lists
// from memory, without the store's scan — what kube-apiserver does for
// consistent lists since 1.31 (ConsistentListFromCache). A JSON list of
// the objects is relayed as watchfanout writes it (relayList), from each
// object's memoized JSON, so no whole list is held on either side; a
// protobuf list is relayed too, in the chunks watchfanout splices from the
// stored bytes (never joined into one buffer on either side); Tables are
// built whole. When watchfanout
// cannot reach the store's revision in time (504) the store serves the
// list, as kube-apiserver falls back to etcd.
func (s *Server) cachedList(ctx context.Context, res *registry.Resource, req *apiv1.ListRequest, out output, stream apiv1.ResourceService_ListServer) (bool, error) {
	enc, ok := cacheEncoding(out)
	consistent := req.GetResourceVersion() == "" && req.GetContinueToken() == ""
	if !ok || !s.fromCache(res) || !cacheable(req.GetResourceVersion(), req.GetResourceVersionMatch(), true) {
		return false, nil
	}
	lreq := &watchv1.ListRequest{
		Resource: s.cacheResource(res), Namespace: req.GetRef().GetNamespace(),
		LabelSelector: req.GetLabelSelector(), FieldSelector: req.GetFieldSelector(),
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		Limit: req.GetLimit(), ContinueToken: req.GetContinueToken(), Encoding: enc, IncludeObject: req.GetIncludeObject(),
	}
	continued := req.GetContinueToken() != ""
	ctx = identity.AppendToOutgoing(ctx, user(ctx))
	if (out.mediaType == negotiation.JSON || out.mediaType == negotiation.Protobuf) && !out.table && !out.partial {
		return s.relayList(ctx, res, lreq, out, consistent, continued, stream)
	}
	resp, err := s.cfg.Watchfanout.Client().List(ctx, lreq)
	if err != nil {
		return s.listFailed(ctx, res, consistent, continued, err)
	}
	if consistent {
		s.m.consistentRead(res.GVR.Resource, true, false)
	}
	return true, stream.Send(&httpbody.HttpBody{ContentType: out.mediaType, Data: resp.GetData()})
}

// relayList serves a JSON or protobuf list from watchfanout's StreamList,
// sending each chunk on as it arrives. When the response takes gzip
// (GzipSink), watchfanout is asked for the list gzip-compressed and its
// chunks, if it says they are, go out as they are. Until the first chunk has come, a failure is
// handled as List's (the store may serve the list instead); after it, the
// response is cut, as a list streamed from the store is.
func (s *Server) relayList(ctx context.Context, res *registry.Resource, lreq *watchv1.ListRequest, out output, consistent, continued bool, stream apiv1.ResourceService_ListServer) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sink := gzipSink(ctx)
	ls, err := s.cfg.Watchfanout.Client().StreamList(askGzip(ctx, sink), &watchv1.StreamListRequest{List: lreq})
	var msg *watchv1.StreamListResponse
	if err == nil {
		msg, err = ls.Recv()
	}
	if err != nil {
		return s.listFailed(ctx, res, consistent, continued, err)
	}
	if sink != nil {
		// The header came with the first message.
		if h, err := ls.Header(); err == nil && gzipped(h) && !sink.StartGzipped() {
			return true, apierrors.NewInternalError(errors.New("a gzip-compressed list cannot be relayed: the response has started"))
		}
	}
	if consistent {
		s.m.consistentRead(res.GVR.Resource, true, false)
	}
	for {
		if err := stream.Send(&httpbody.HttpBody{ContentType: out.mediaType, Data: msg.GetData()}); err != nil {
			return true, err
		}
		if msg, err = ls.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return true, nil
			}
			return true, err
		}
	}
}

// listFailed decides what a failed list from watchfanout becomes: served
// by the store (handled false) when watchfanout cannot be reached or, for
// a consistent list, lagged the store, or for a continued list, found its
// revision compacted (the store path answers that 410 with a token for an
// inconsistent continuation, as kube-apiserver does); else watchfanout's
// error.
func (s *Server) listFailed(ctx context.Context, res *registry.Resource, consistent, continued bool, err error) (bool, error) {
	fallback := fallBack(err) || (consistent && lagged(ctx, err)) ||
		(continued && apistatus.FromError(err).Code == http.StatusGone)
	if consistent {
		s.m.consistentRead(res.GVR.Resource, false, fallback)
	}
	return !fallback, err
}
