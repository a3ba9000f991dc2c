package server

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"testing"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestWatchManySharesBatches: watches of one stream that read shared
// messages get an event batch once, in a message naming them all (id and
// also); each still sees every event once, in resourceVersion order. A
// watch whose selector leaves some events out shares the others' messages
// for the events it gets, and sees only those. A watch that did not ask
// for shared messages and one of another format are never named in
// another watch's message, and get their own events as before.
func TestWatchManySharesBatches(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	m := e.watchMany()
	changesOnly := func() *watchv1.WatchRequest {
		return &watchv1.WatchRequest{Resource: configMaps, Namespace: "s", ResourceVersionMatch: notOlderThan, SendInitialEvents: new(bool)}
	}
	open := func(id int64, shared bool, req *watchv1.WatchRequest) {
		m.send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Open{Open: &watchv1.WatchOpen{Id: id, Window: 64, Request: req, Shared: shared}}})
	}
	for id := int64(1); id <= 4; id++ {
		open(id, true, changesOnly())
	}
	open(5, false, changesOnly())
	proto := changesOnly()
	proto.Encoding = watchv1.Encoding_ENCODING_PROTOBUF
	open(6, true, proto)
	odd := changesOnly()
	odd.LabelSelector = "odd=yes"
	open(7, true, odd)
	for id := int64(1); id <= 7; id++ {
		m.first(id)
	}

	const events = 30
	var want, wantOdd []string
	for i := range events {
		labels := map[string]string{}
		if i%2 == 1 {
			labels["odd"] = "yes"
			wantOdd = append(wantOdd, fmt.Sprintf("ADDED s/o%02d", i))
		}
		e.put("s", fmt.Sprintf("o%02d", i), labels)
		want = append(want, fmt.Sprintf("ADDED s/o%02d", i))
	}

	got := map[int64][]string{}
	revs := map[int64]int64{}
	shared := 0
	wantCount := map[int64]int{1: events, 2: events, 3: events, 4: events, 5: events, 6: events, 7: len(wantOdd)}
	done := func() bool {
		for id, n := range wantCount {
			if len(got[id]) < n {
				return false
			}
		}
		return true
	}
	for !done() {
		resp, err := m.st.Recv()
		if err != nil {
			t.Fatalf("stream ended (%v) with %v", err, got)
		}
		if resp.GetEnd() {
			t.Fatalf("watch %d ended: %v", resp.GetId(), resp)
		}
		ids := append([]int64{resp.GetId()}, resp.GetAlso()...)
		if len(ids) > 1 {
			shared++
			for _, id := range ids {
				if id == 5 || id == 6 {
					t.Fatalf("a shared message names watch %d (ids %v)", id, ids)
				}
			}
		}
		var evs []string
		if resp.GetId() == 6 {
			// Protobuf frames, each length-prefixed: counted, as the
			// object names do not matter here.
			for b := resp.GetResponse().GetFrames(); len(b) >= 4; b = b[4+binary.BigEndian.Uint32(b):] {
				evs = append(evs, "frame")
			}
		} else {
			evs = descs(frames(t, resp.GetResponse().GetFrames()))
		}
		rv, err := strconv.ParseInt(resp.GetResponse().GetResourceVersion(), 10, 64)
		if err != nil {
			t.Fatalf("message %v: %v", resp, err)
		}
		for _, id := range ids {
			got[id] = append(got[id], evs...)
			if rv <= revs[id] {
				t.Fatalf("watch %d: resourceVersion %d after %d", id, rv, revs[id])
			}
			revs[id] = rv
		}
	}
	if len(got[6]) != events {
		t.Errorf("watch 6 got %d frames, want %d", len(got[6]), events)
	}
	for id := int64(1); id <= 5; id++ {
		if !slices.Equal(got[id], want) {
			t.Errorf("watch %d got %v, want %v", id, got[id], want)
		}
	}
	if !slices.Equal(got[7], wantOdd) {
		t.Errorf("watch 7 got %v, want %v", got[7], wantOdd)
	}
	// One write reaches the four watches at once; that their batches are
	// never sent together in 30 writes would mean sharing does not work.
	if shared == 0 {
		t.Errorf("no message was shared by watches 1-4 over %d events", events)
	}
}
