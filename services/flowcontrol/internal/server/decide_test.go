package server_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/server"
)

// oneSeat is the bootstrap configuration with one seat in every limited
// level, and one queue of ten in every queuing one.
func oneSeat() apf.Configuration {
	conf := apf.Bootstrap(apf.DefaultServerConcurrencyLimit)
	for i := range conf.Levels {
		l := &conf.Levels[i]
		if l.Exempt {
			continue
		}
		l.Seats, l.Nominal, l.MinSeats, l.MaxSeats = 1, 1, 1, 0
		if l.Queuing != nil {
			l.Queuing = &apf.Queuing{Queues: 1, HandSize: 1, QueueLengthLimit: 10}
		}
	}
	return conf
}

// serve serves a Server over a Controller of conf on 127.0.0.1 and
// returns a connection to it.
func serve(t *testing.T, conf apf.Configuration) *grpc.ClientConn {
	t.Helper()
	ctrl, err := apf.New(apf.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctrl.Close() })
	if err := ctrl.Apply(conf); err != nil {
		t.Fatal(err)
	}
	srv := server.New(ctrl, nil, nil)
	gs := grpc.NewServer()
	flowcontrolv1.RegisterFlowControlServiceServer(gs, srv)
	flowcontrolv1.RegisterDecisionServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() { srv.Close(); gs.Stop() })
	conn, err := grpcclient.Dial(lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestDecideFreeSeat: on a Decide stream, Acquires that find a free seat
// and nothing queued are decided as the batch is read: their answers
// come in one message, in the order of the calls, with the batch's
// ReleaseGrants; of two Acquires in one batch for a level of one seat
// the first is granted and the second queued, and a later Acquire of
// that level queues behind it though a seat is free for no one else:
// each is granted in turn as the seat is released, answered in the
// message that answers the release that dispatched it.
func TestDecideFreeSeat(t *testing.T) {
	conn := serve(t, oneSeat())
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := flowcontrolv1.NewDecisionServiceClient(conn).Decide(metadata.AppendToOutgoingContext(ctx, decideclient.BatchMetadata, "1"))
	if err != nil {
		t.Fatal(err)
	}
	acquire := func(id uint64, user string) *flowcontrolv1.DecideRequest {
		return &flowcontrolv1.DecideRequest{Id: id, Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: &flowcontrolv1.AcquireRequest{
			GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{User: user, Verb: "get", Path: "/api"},
		}}}
	}
	masters := func(id uint64) *flowcontrolv1.DecideRequest {
		r := acquire(id, "admin")
		r.GetAcquire().Digest.Groups = []string{"system:masters"}
		return r
	}
	release := func(id uint64, grants ...string) *flowcontrolv1.DecideRequest {
		return &flowcontrolv1.DecideRequest{Id: id, Call: &flowcontrolv1.DecideRequest_ReleaseGrants{
			ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: grants},
		}}
	}
	send := func(calls ...*flowcontrolv1.DecideRequest) {
		t.Helper()
		if err := st.Send(&flowcontrolv1.DecideRequest{Calls: calls}); err != nil {
			t.Fatal(err)
		}
	}
	// recv returns the ids of the answers of the next message, and the
	// answers by id.
	got := map[uint64]*flowcontrolv1.DecideResponse{}
	recv := func() []uint64 {
		t.Helper()
		resp, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var ids []uint64
		for _, a := range append(resp.GetAnswers(), resp) {
			if a.GetResult() != nil {
				ids = append(ids, a.GetId())
				got[a.GetId()] = a
			}
		}
		return ids
	}
	grant := func(id uint64) string {
		t.Helper()
		g := got[id].GetAcquire().GetGrant()
		if g == nil {
			t.Fatalf("call %d: %v, want a grant", id, got[id])
		}
		return g.GetId()
	}
	same := func(a, b []uint64) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}

	// Exempt, a free seat, exempt, and a release: all decided at once.
	send(masters(1), acquire(2, "alice"), masters(3), release(4, "no-such-grant"))
	if ids := recv(); !same(ids, []uint64{1, 2, 3, 4}) {
		t.Fatalf("answers %v in the first message, want 1, 2, 3, 4 together", ids)
	}
	alice := grant(2)
	if err := st.Send(&flowcontrolv1.DecideRequest{Calls: []*flowcontrolv1.DecideRequest{release(5, alice)}}); err != nil {
		t.Fatal(err)
	}
	if ids := recv(); !same(ids, []uint64{5}) || got[5].GetReleaseGrants().GetReleased() != 1 {
		t.Fatalf("release of alice's grant: %v %v", ids, got[5])
	}

	// bob takes the seat; carol, after him in the same batch, queues.
	send(acquire(6, "bob"), acquire(7, "carol"))
	if ids := recv(); !same(ids, []uint64{6}) {
		t.Fatalf("answers %v, want bob's (6) alone", ids)
	}
	bob := grant(6)
	fc := flowcontrolv1.NewFlowControlServiceClient(conn)
	waiting := func(want uint32) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			dump, err := fc.Dump(ctx, &flowcontrolv1.DumpRequest{})
			if err != nil {
				t.Fatal(err)
			}
			var n uint32
			for _, l := range dump.GetPriorityLevels() {
				n += l.GetWaiting()
			}
			if n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d requests waiting, want %d", n, want)
			}
		}
	}
	waiting(1)
	// dave queues behind carol.
	send(acquire(8, "dave"))
	waiting(2)
	send(release(9, bob))
	if ids := recv(); !same(ids, []uint64{7, 9}) {
		t.Fatalf("answers %v after bob's release, want carol's grant (7) and the release (9) together", ids)
	}
	carol := grant(7)
	if got[8] != nil {
		t.Fatalf("dave answered before carol released: %v", got[8])
	}
	send(release(10, carol))
	if ids := recv(); !same(ids, []uint64{8, 10}) {
		t.Fatalf("answers %v after carol's release, want dave's grant (8) and the release (10) together", ids)
	}
	send(release(11, grant(8)))
	for got[11] == nil {
		recv()
	}
	if got[11].GetReleaseGrants().GetReleased() != 1 {
		t.Fatalf("release of dave's grant: %v", got[11])
	}
	waiting(0)
}

// TestDecideAnswersMatchTheirCalls: many Acquires on two Decide streams
// (whose answers' messages the Server recycles through one pool), from
// concurrent callers, some exempt (answered at once) and some for a
// level of one seat (most of them queued, answered from the goroutine of
// the release that dispatches them): each caller gets the answer of its
// own call, whatever other answers went out before it; every limited
// grant has an id no other grant had, and its release releases it once.
func TestDecideAnswersMatchTheirCalls(t *testing.T) {
	conn := serve(t, oneSeat())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	var streams [2]*decideclient.Client
	for i := range streams {
		dc, err := decideclient.Open(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		defer dc.Close()
		streams[i] = dc
	}
	const callers, rounds = 8, 150
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	errs := make(chan error, callers)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dc := streams[w%len(streams)]
			errs <- func() error {
				for i := range rounds {
					exempt := (w+i)%3 == 0
					d := &flowcontrolv1.RequestDigest{User: fmt.Sprintf("user-%d", w), Verb: "get", Path: "/api"}
					if exempt {
						d.Groups = []string{"system:masters"}
					}
					resp, err := dc.Acquire(ctx, &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Digest: d})
					if err != nil {
						return fmt.Errorf("caller %d round %d: %w", w, i, err)
					}
					g := resp.GetGrant()
					if exempt {
						if !g.GetExempt() || g.GetPriorityLevel() != apf.LevelExempt || g.GetId() != "" || g.GetSeats() != 0 {
							return fmt.Errorf("caller %d round %d, exempt: got %v", w, i, g)
						}
						continue
					}
					if g.GetExempt() || g.GetPriorityLevel() != apf.LevelGlobalDefault || g.GetId() == "" || g.GetSeats() != 1 {
						return fmt.Errorf("caller %d round %d, limited: got %v", w, i, g)
					}
					mu.Lock()
					again := seen[g.GetId()]
					seen[g.GetId()] = true
					mu.Unlock()
					if again {
						return fmt.Errorf("caller %d round %d: grant %s handed out before", w, i, g.GetId())
					}
					rel, err := dc.ReleaseGrants(ctx, []string{g.GetId()})
					if err != nil || rel.GetReleased() != 1 {
						return fmt.Errorf("caller %d round %d: release of %s: %v %v", w, i, g.GetId(), rel, err)
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if want := callers * rounds * 2 / 3; len(seen) < want-callers {
		t.Fatalf("%d limited grants, want about %d", len(seen), want)
	}
}
