package app_test

import (
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc/status"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// TestShutdownEndsWatchManyStreams: a client keeps its WatchMany stream
// open whether or not it has watches; when the service shuts down the
// stream ends cleanly (the client sees io.EOF after its watch's end and
// goes elsewhere) instead of being cut when the graceful stop gives up
// (UNAVAILABLE, and a 10-second wait for every Close).
func TestShutdownEndsWatchManyStreams(t *testing.T) {
	e := newEnv(t, app.Config{})
	e.mustPut(configMap("ns", "cm", nil, "x"))
	stream, err := e.watch.WatchMany(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	open := &watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Open{Open: &watchv1.WatchOpen{Id: 1, Request: &watchv1.WatchRequest{Resource: cmResource, Namespace: "ns"}}}}
	if err := stream.Send(open); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	go e.fanout.Close()
	ended := false
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream ended with %v (%v), want a clean end", status.Code(err), err)
		}
		if resp.GetEnd() {
			ended = true
		}
	}
	if !ended {
		t.Fatal("the stream ended without ending its watch")
	}
}
