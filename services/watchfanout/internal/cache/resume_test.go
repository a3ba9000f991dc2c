package cache

import (
	"context"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// fakeConn answers every store watch with the next script of responses;
// the stream then ends (as when the member serving it stops).
type fakeConn struct {
	grpc.ClientConnInterface
	scripts [][]*storev1.WatchResponse
	starts  []int64 // start revisions of the watches created
}

func (c *fakeConn) NewStream(context.Context, *grpc.StreamDesc, string, ...grpc.CallOption) (grpc.ClientStream, error) {
	s := &fakeStream{c: c, script: c.scripts[0]}
	c.scripts = c.scripts[1:]
	return s, nil
}

type fakeStream struct {
	grpc.ClientStream
	c      *fakeConn
	script []*storev1.WatchResponse
}

func (s *fakeStream) SendMsg(m any) error {
	s.c.starts = append(s.c.starts, m.(*storev1.WatchRequest).GetCreateRequest().GetStartRevision())
	return nil
}

func (s *fakeStream) RecvMsg(m any) error {
	if len(s.script) == 0 {
		return io.EOF
	}
	resp := m.(*storev1.WatchResponse)
	resp.Events, resp.ProgressNotify = s.script[0].GetEvents(), s.script[0].GetProgressNotify()
	s.script = s.script[1:]
	return nil
}

func events(revs ...int64) *storev1.WatchResponse {
	resp := &storev1.WatchResponse{}
	for _, r := range revs {
		resp.Events = append(resp.Events, &storev1.Event{Kv: &storev1.KeyValue{ModRevision: r}})
	}
	return resp
}

// watchOnce runs one filtered store watch from start and returns the
// revisions of the events it delivered.
func watchOnce(t *testing.T, f *resumeFilter, start int64) []int64 {
	t.Helper()
	s, err := storev1.NewWatchServiceClient(f).Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{StartRevision: start}}}); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		resp, err := s.Recv()
		if err != nil {
			return got
		}
		for _, ev := range resp.GetEvents() {
			got = append(got, ev.GetKv().GetModRevision())
		}
	}
}

// TestResumeFilterDropsRedelivered: a watch that resumes at the revision
// of the last delivered event skips as many of that revision's events as
// were delivered (one revision may span responses); a watch that starts
// later (after a re-list), or earlier (a startup replay), is untouched.
func TestResumeFilterDropsRedelivered(t *testing.T) {
	fc := &fakeConn{scripts: [][]*storev1.WatchResponse{
		{events(3, 4), events(5, 5)},        // ends inside revision 5
		{events(5, 5, 5), events(6)},        // resumed at 5: two of its events were delivered
		{events(6), events(7)},              // resumed at 6: delivered once
		{events(9)},                         // after a re-list at 8: nothing to skip
		{events(2, 3)},                      // from an older revision: nothing to skip
		{events(3), {ProgressNotify: true}}, // resumed at 3 again: a response of only delivered events arrives empty
	}}
	f := &resumeFilter{ClientConnInterface: fc}
	for i, tc := range []struct {
		start int64
		want  []int64
	}{
		{3, []int64{3, 4, 5, 5}},
		{5, []int64{5, 6}},
		{6, []int64{7}},
		{9, []int64{9}},
		{2, []int64{2, 3}},
		{3, nil},
	} {
		if got := watchOnce(t, f, tc.start); !slices.Equal(got, tc.want) {
			t.Errorf("watch %d from %d delivered %v, want %v", i, tc.start, got, tc.want)
		}
	}
}
