package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// streamed is a StreamList read to its end: the messages' data joined
// (copied: an in-process stream's chunks are the server's buffers, valid
// until the next Recv), the first message's metadata, the message count,
// and the error that ended it (nil at io.EOF).
type streamed struct {
	data []byte
	meta *watchv1.StreamListResponse
	msgs int
	err  error
}

func readStreamList(ls grpc.ServerStreamingClient[watchv1.StreamListResponse], err error) streamed {
	var s streamed
	if err != nil {
		s.err = err
		return s
	}
	for {
		msg, err := ls.Recv()
		if errors.Is(err, io.EOF) {
			return s
		}
		if err != nil {
			s.err = err
			return s
		}
		if s.msgs == 0 {
			s.meta = proto.Clone(msg).(*watchv1.StreamListResponse)
			s.meta.Data = nil
		}
		s.msgs++
		s.data = append(s.data, msg.GetData()...)
	}
}

// TestStreamListInProcess: StreamList called in process
// (App.StreamListInProcess, as the all-in-one's gateway calls it) gives
// byte for byte the messages the gRPC method gives: the same chunks, the
// same list metadata, in JSON and protobuf, whole (consistent),
// resourceVersion=0, and in chunks followed by their continue tokens; and
// the same errors (an unknown resource, a malformed continue token).
func TestStreamListInProcess(t *testing.T) {
	e := newEnv(t, app.Config{})
	const n = 300
	data := strings.Repeat("x", 4<<10) // 1.2 MB in all: several messages
	for i := range n {
		e.mustPut(configMap("big", fmt.Sprintf("cm-%03d", i), nil, data))
	}
	local := e.fanout.StreamListInProcess(nil)
	both := func(ctx context.Context, req *watchv1.ListRequest) (viaGRPC, inProcess streamed) {
		t.Helper()
		viaGRPC = readStreamList(e.watch.StreamList(ctx, &watchv1.StreamListRequest{List: req}))
		inProcess = readStreamList(local(ctx, &watchv1.StreamListRequest{List: req}))
		return viaGRPC, inProcess
	}
	same := func(what string, g, l streamed) {
		t.Helper()
		if (g.err == nil) != (l.err == nil) {
			t.Fatalf("%s: gRPC error %v, in process %v", what, g.err, l.err)
		}
		if g.err != nil {
			gs, ls := status.Convert(g.err), status.Convert(l.err)
			if gs.Code() != ls.Code() || gs.Message() != ls.Message() || apiStatus(t, g.err).GetCode() != apiStatus(t, l.err).GetCode() {
				t.Errorf("%s: gRPC error %v, in process %v", what, g.err, l.err)
			}
			return
		}
		if !bytes.Equal(g.data, l.data) || g.msgs != l.msgs || !proto.Equal(g.meta, l.meta) {
			t.Errorf("%s: in process %d bytes in %d messages (%v), gRPC %d bytes in %d messages (%v)",
				what, len(l.data), l.msgs, l.meta, len(g.data), g.msgs, g.meta)
		}
	}
	ctx := t.Context()
	for _, enc := range []watchv1.Encoding{watchv1.Encoding_ENCODING_JSON, watchv1.Encoding_ENCODING_PROTOBUF} {
		for _, rv := range []string{"", "0"} {
			g, l := both(ctx, &watchv1.ListRequest{Resource: cmResource, Namespace: "big", ResourceVersion: rv, Encoding: enc})
			same(fmt.Sprintf("%s rv=%q", enc, rv), g, l)
			if g.msgs < 2 {
				t.Errorf("%s rv=%q: a list of %d bytes in %d message(s), want several", enc, rv, len(g.data), g.msgs)
			}
		}
		cont, chunks := "", 0
		for {
			g, l := both(ctx, &watchv1.ListRequest{Resource: cmResource, Namespace: "big", Limit: 120, ContinueToken: cont, Encoding: enc})
			same(fmt.Sprintf("%s chunk %d", enc, chunks), g, l)
			if g.err != nil {
				break
			}
			chunks++
			if cont = g.meta.GetContinueToken(); cont == "" {
				break
			}
		}
		if chunks != 3 {
			t.Errorf("%s: %d chunks of 120 of %d objects, want 3", enc, chunks, n)
		}
		g, l := both(ctx, &watchv1.ListRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "nothings"}, Namespace: "big", Encoding: enc})
		same(fmt.Sprintf("%s unknown resource", enc), g, l)
		if g.err == nil {
			t.Errorf("%s: a list of an unknown resource succeeded", enc)
		}
		g, l = both(ctx, &watchv1.ListRequest{Resource: cmResource, Namespace: "big", ContinueToken: "not-a-token", Encoding: enc})
		same(fmt.Sprintf("%s bad continue token", enc), g, l)
		if g.err == nil {
			t.Errorf("%s: a list with a malformed continue token succeeded", enc)
		}
	}
}
