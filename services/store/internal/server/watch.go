package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

type watchServer struct {
	storev1.UnimplementedWatchServiceServer
	s *Server
}

// Watch serves one watch per stream.
//
// The first message must be a create_request. A start_revision below the
// compacted revision fails the stream at creation with OUT_OF_RANGE and a
// storev1.CompactedError detail (no "created" response is sent). Later
// messages may be progress_requests. When the store ends the watch (too
// slow, shutdown) the last response has canceled set and a cancel_reason;
// if that response cannot be delivered within WatchCancelGrace (the client
// is not reading), the stream ends with RESOURCE_EXHAUSTED.
func (ws *watchServer) Watch(stream grpc.BidiStreamingServer[storev1.WatchRequest, storev1.WatchResponse]) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	create := first.GetCreateRequest()
	if create == nil {
		return status.Error(codes.InvalidArgument, "store: the first watch message must be a create_request")
	}
	w, err := ws.s.cfg.Watches.Watch(create)
	if err != nil {
		return toStatus(err)
	}
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()

	// send is used by the Run goroutine only (after this handler's first
	// Send below, which happens before Run starts).
	send := func(r *storev1.WatchResponse) error {
		r.Header = ws.s.fillHeader(r.Header)
		return stream.Send(r)
	}
	if err := send(&storev1.WatchResponse{Header: &storev1.ResponseHeader{Revision: w.Rev()}, Created: true}); err != nil {
		w.Close()
		return err
	}

	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(ctx, send) }()

	recvDone := make(chan error, 1)
	var once sync.Once
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				once.Do(func() { recvDone <- err })
				return
			}
			switch {
			case m.GetProgressRequest() != nil:
				w.RequestProgress()
			case m.GetCreateRequest() != nil:
				once.Do(func() {
					recvDone <- status.Error(codes.InvalidArgument, "store: one watch per stream; open another stream")
				})
				return
			}
		}
	}()

	canceled := w.Canceled()
	for {
		select {
		case err := <-runDone:
			return toStatus(err)
		case err := <-recvDone:
			if errors.Is(err, io.EOF) {
				// The client sends no more requests but may still read.
				recvDone = nil
				continue
			}
			cancel()
			ws.awaitRun(runDone)
			return err
		case <-canceled:
			// Run sends the cancellation and returns, unless the client
			// does not read.
			if ok, err := ws.awaitRun(runDone); ok {
				return toStatus(err)
			}
			return status.Error(codes.ResourceExhausted, "store: watcher is too slow and did not read its cancellation")
		}
	}
}

// awaitRun waits up to WatchCancelGrace for the Run goroutine.
func (ws *watchServer) awaitRun(runDone <-chan error) (finished bool, err error) {
	t := time.NewTimer(ws.s.cfg.WatchCancelGrace)
	defer t.Stop()
	select {
	case err := <-runDone:
		return true, err
	case <-t.C:
		return false, nil
	}
}
