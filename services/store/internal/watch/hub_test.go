package watch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/meridian-cp/meridian/lib/polltest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc/mvcctest"
)

// fixture is a store plus hub, with writes published the way the FSM does:
// commit, then publish.
type fixture struct {
	t       *testing.T
	store   *mvcc.Store
	hub     *Hub
	mu      sync.Mutex
	applied uint64
}

func newFixture(t *testing.T, opts Options) *fixture {
	t.Helper()
	s := mvcctest.Open(t)
	h, err := New(s, s.Rev(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return &fixture{t: t, store: s, hub: h}
}

func (f *fixture) apply(ops ...*storev1.RequestOp) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.store.NewWriteBatch()
	defer w.Close()
	if _, err := w.Txn(&storev1.TxnRequest{Success: ops}); err != nil {
		f.t.Error(err)
		return 0
	}
	f.applied++
	evs, err := w.Commit(f.applied, pebble.NoSync)
	if err != nil {
		f.t.Error(err)
		return 0
	}
	f.hub.Publish(w.Rev(), evs)
	return w.Rev()
}

func (f *fixture) compact(rev int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.store.NewWriteBatch()
	defer w.Close()
	if _, err := w.Compact(rev); err != nil {
		f.t.Fatal(err)
	}
	f.applied++
	if _, err := w.Commit(f.applied, pebble.NoSync); err != nil {
		f.t.Fatal(err)
	}
}

func put(k, v string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func del(k string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(k)}}}
}

// stream runs a watcher and collects its responses.
type stream struct {
	mu    sync.Mutex
	resps []*storev1.WatchResponse
	got   chan struct{}
	done  chan error
	cance context.CancelFunc
}

func run(t *testing.T, w *Watcher) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &stream{got: make(chan struct{}, 1), done: make(chan error, 1), cance: cancel}
	go func() {
		s.done <- w.Run(ctx, func(r *storev1.WatchResponse) error {
			s.mu.Lock()
			s.resps = append(s.resps, r)
			s.mu.Unlock()
			select {
			case s.got <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *stream) events() []*storev1.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var evs []*storev1.Event
	for _, r := range s.resps {
		evs = append(evs, r.Events...)
	}
	return evs
}

func TestWatchFromPastRevisionInOrderWithPrevKV(t *testing.T) {
	f := newFixture(t, Options{})
	f.apply(put("a", "1"))                // 1
	f.apply(put("b", "1"))                // 2
	f.apply(put("a", "2"), put("c", "1")) // 3
	f.apply(del("a"))                     // 4
	f.apply(put("a", "3"))                // 5

	w, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b"), StartRevision: 2, PrevKv: true})
	if err != nil {
		t.Fatal(err)
	}
	s := run(t, w)
	f.apply(put("a", "4")) // 6, live
	f.apply(put("z", "x")) // 7, not watched
	polltest.Until(t, 10*time.Second, "4 events", func() bool { return len(s.events()) == 4 })
	var got []string
	for _, ev := range s.events() {
		prev := "-"
		if ev.PrevKv != nil {
			prev = string(ev.PrevKv.Value)
		}
		got = append(got, fmt.Sprintf("%v %s=%s@%d prev=%s", ev.Type, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision, prev))
	}
	want := []string{"TYPE_PUT a=2@3 prev=1", "TYPE_DELETE a=@4 prev=2", "TYPE_PUT a=3@5 prev=-", "TYPE_PUT a=4@6 prev=3"}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}

	// Without prev_kv, live events lose it.
	w2, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	s2 := run(t, w2)
	f.apply(put("a", "5"))
	polltest.Until(t, 10*time.Second, "live event", func() bool { return len(s2.events()) == 1 })
	if ev := s2.events()[0]; ev.PrevKv != nil || ev.Kv.ModRevision != 8 {
		t.Fatalf("live event without prev_kv: %v", ev)
	}
}

// TestCatchUpToLiveTransition starts watchers while a writer runs and checks
// that each sees every revision from its start exactly once, in order.
func TestCatchUpToLiveTransition(t *testing.T) {
	f := newFixture(t, Options{BufferSize: 100000})
	const writes = 600
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range writes {
			f.apply(put(fmt.Sprintf("k%d", i%13), fmt.Sprint(i)))
		}
		close(stop)
	}()
	type started struct {
		start int64
		s     *stream
	}
	var ws []started
	for i := 0; i < 12; i++ {
		start := int64(1)
		if i%3 == 1 {
			start = f.store.Rev() // somewhere in the middle
		}
		if i%3 == 2 {
			start = 0 // from now
		}
		w, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: start})
		if err != nil {
			t.Fatal(err)
		}
		if start == 0 {
			start = w.Rev() + 1
		}
		if start == 0 { // store was empty
			start = 1
		}
		ws = append(ws, started{start, run(t, w)})
		time.Sleep(time.Millisecond)
	}
	<-stop
	wg.Wait()
	for i, w := range ws {
		want := writes - w.start + 1
		polltest.Until(t, 10*time.Second, fmt.Sprintf("watcher %d events", i), func() bool { return int64(len(w.s.events())) >= want })
		evs := w.s.events()
		if int64(len(evs)) != want {
			t.Fatalf("watcher %d from %d: %d events, want %d", i, w.start, len(evs), want)
		}
		for j, ev := range evs {
			if ev.Kv.ModRevision != w.start+int64(j) {
				t.Fatalf("watcher %d from %d: event %d has revision %d (gap or duplicate)", i, w.start, j, ev.Kv.ModRevision)
			}
		}
	}
}

func TestSlowWatcherIsCancelledOthersContinue(t *testing.T) {
	f := newFixture(t, Options{BufferSize: 4})
	slow, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	block := make(chan struct{})
	var last *storev1.WatchResponse
	slowDone := make(chan error, 1)
	go func() {
		slowDone <- slow.Run(context.Background(), func(r *storev1.WatchResponse) error {
			if !r.Canceled {
				<-block // a client that does not read
			}
			last = r
			return nil
		})
	}()
	fast, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	fs := run(t, fast)
	for i := range 50 {
		f.apply(put("k", fmt.Sprint(i)))
		// A reader that keeps up: it has consumed each write before the
		// next, so only the blocked watcher's queue can overflow.
		polltest.Until(t, 10*time.Second, "fast watcher keeps up", func() bool { return len(fs.events()) == i+1 })
	}
	select {
	case <-slow.Canceled():
	case <-time.After(5 * time.Second):
		t.Fatal("slow watcher not cancelled")
	}
	close(block)
	if err := <-slowDone; err != nil {
		t.Fatalf("slow Run: %v", err)
	}
	if !last.Canceled || last.CancelReason != ReasonTooSlow {
		t.Fatalf("last response of the slow watcher: %v", last)
	}
	polltest.Until(t, 10*time.Second, "fast watcher events", func() bool { return len(fs.events()) == 50 })
	if f.hub.Count() != 1 {
		t.Fatalf("%d watchers registered, want 1", f.hub.Count())
	}
}

func TestProgressNotify(t *testing.T) {
	f := newFixture(t, Options{ProgressInterval: 30 * time.Millisecond})
	f.apply(put("other", "1"))
	w, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("a"), ProgressNotify: true})
	if err != nil {
		t.Fatal(err)
	}
	s := run(t, w)
	f.apply(put("other", "2")) // revision 2 matches nothing
	progress := func(rev int64) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.resps {
			if r.ProgressNotify && len(r.Events) == 0 && r.Header.Revision >= rev {
				return true
			}
		}
		return false
	}
	polltest.Until(t, 10*time.Second, "periodic progress notification", func() bool { return progress(2) })

	// On request, without progress_notify.
	w2, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("a")})
	if err != nil {
		t.Fatal(err)
	}
	s2 := run(t, w2)
	f.apply(put("other", "3"))
	w2.RequestProgress()
	polltest.Until(t, 10*time.Second, "requested progress notification", func() bool {
		s2.mu.Lock()
		defer s2.mu.Unlock()
		return len(s2.resps) == 1 && s2.resps[0].ProgressNotify && s2.resps[0].Header.Revision == 3
	})
}

func TestWatchCompacted(t *testing.T) {
	f := newFixture(t, Options{})
	for i := range 10 {
		f.apply(put("k", fmt.Sprint(i)))
	}
	f.compact(6)
	_, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("k"), StartRevision: 5})
	var ce *mvcc.CompactedError
	if !errors.As(err, &ce) || ce.CompactRev != 6 || ce.Requested != 5 {
		t.Fatalf("watch below compaction: %v", err)
	}
	w, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("k"), StartRevision: 6})
	if err != nil {
		t.Fatal(err)
	}
	s := run(t, w)
	polltest.Until(t, 10*time.Second, "events from the compacted revision", func() bool { return len(s.events()) == 5 })
	if _, err := f.hub.Watch(&storev1.WatchCreateRequest{}); !errors.Is(err, mvcc.ErrInvalidArgument) {
		t.Fatalf("watch with empty key: %v", err)
	}
}

// TestWatchAheadOfTheMember: a watch that resumes on a member which has
// not yet applied its start revision (the member a client fails over to
// lags the one it left) gets every event from that revision on, once and
// in order, none before it, and no progress notification claims a
// revision whose events it has not been sent.
func TestWatchAheadOfTheMember(t *testing.T) {
	f := newFixture(t, Options{})
	for i := range 3 {
		f.apply(put("a", fmt.Sprint(i))) // revisions 1..3
	}
	const start = 6
	w, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte("a"), StartRevision: start})
	if err != nil {
		t.Fatal(err)
	}
	if w.Rev() != 3 {
		t.Fatalf("created at %d, want the member's revision 3", w.Rev())
	}
	s := run(t, w)
	w.RequestProgress()
	for i := 3; i < 8; i++ {
		f.apply(put("a", fmt.Sprint(i))) // revisions 4..8
		w.RequestProgress()
	}
	polltest.Until(t, 10*time.Second, "events 6..8", func() bool { return len(s.events()) >= 3 })
	polltest.Until(t, 10*time.Second, "a progress notification at 8", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		last := s.resps[len(s.resps)-1]
		return last.ProgressNotify && last.Header.Revision == 8
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	var revs []int64
	for _, r := range s.resps {
		for _, ev := range r.Events {
			revs = append(revs, ev.Kv.ModRevision)
		}
		if r.ProgressNotify {
			// Every event up to the notified revision was sent before it.
			want := max(0, int(r.Header.Revision)-start+1)
			if len(revs) < want {
				t.Errorf("progress notification at %d after events %v", r.Header.Revision, revs)
			}
		}
	}
	if fmt.Sprint(revs) != "[6 7 8]" {
		t.Errorf("events at %v, want [6 7 8]", revs)
	}
}

// TestRevisionComplete: a response is marked revision_complete exactly when
// no later response carries events of its header revision, both when one
// revision's events are split over responses (MaxEventsPerResponse) and
// when they are not, live and while catching up from history.
func TestRevisionComplete(t *testing.T) {
	f := newFixture(t, Options{MaxEventsPerResponse: 2})
	f.apply(put("a", "1"), put("b", "1"), put("c", "1")) // three events at one revision
	f.apply(put("a", "2"))
	past, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: 1})
	if err != nil {
		t.Fatal(err)
	}
	live, err := f.hub.Watch(&storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	sp, sl := run(t, past), run(t, live)
	f.apply(put("a", "3"), put("b", "3"), put("c", "3"), put("d", "3"), put("e", "3"))
	f.apply(put("b", "4"), put("c", "4"))
	check := func(name string, s *stream, want int) {
		polltest.Until(t, 10*time.Second, name+" events", func() bool { return len(s.events()) >= want })
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, r := range s.resps {
			rev := r.GetHeader().GetRevision()
			later := false
			for _, n := range s.resps[i+1:] {
				for _, ev := range n.GetEvents() {
					later = later || ev.GetKv().GetModRevision() == rev
				}
			}
			if r.GetRevisionComplete() == later {
				t.Errorf("%s: response %d (revision %d, %d events): revision_complete %v, later events of the revision %v",
					name, i, rev, len(r.GetEvents()), r.GetRevisionComplete(), later)
			}
		}
	}
	check("from revision 1", sp, 3+1+5+2)
	check("live", sl, 5+2)
}
