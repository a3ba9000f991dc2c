package app_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
)

// TestDecideStreamBatches: a client that opens the stream with the batch
// metadata may send several calls in one message and gets each answered
// by its id, with the server's header saying it takes batches; a client
// without it gets one answer per message; decideclient's concurrent calls
// (coalesced) are all answered and leave no seat behind.
func TestDecideStreamBatches(t *testing.T) {
	conn, _ := start(t, app.Config{})
	// A call left unanswered fails the test at this bound, not at the
	// package's timeout.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	acquire := func(user string) *flowcontrolv1.AcquireRequest {
		return &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{
			User: user, Groups: []string{"system:authenticated"}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
		}}
	}
	dsc := flowcontrolv1.NewDecisionServiceClient(conn)

	st, err := dsc.Decide(metadata.AppendToOutgoingContext(ctx, decideclient.BatchMetadata, "1"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := st.Header()
	if err != nil || !slices.Contains(md.Get(decideclient.BatchMetadata), "1") {
		t.Fatalf("header %v %v, want %s: 1", md, err, decideclient.BatchMetadata)
	}
	// answers reads until the calls named by ids are answered.
	answers := func(ids ...uint64) map[uint64]*flowcontrolv1.DecideResponse {
		got := map[uint64]*flowcontrolv1.DecideResponse{}
		for len(got) < len(ids) {
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range append(resp.GetAnswers(), resp) {
				if a.GetResult() != nil {
					got[a.GetId()] = a
				}
			}
		}
		return got
	}
	err = st.Send(&flowcontrolv1.DecideRequest{Calls: []*flowcontrolv1.DecideRequest{
		{Id: 1, Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: acquire("alice")}},
		{Id: 2, Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: acquire("bob")}},
		{Id: 3, Call: &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: []string{"no-such-grant"}}}},
		{Id: 4},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := answers(1, 2, 3, 4)
	g1, g2 := got[1].GetAcquire().GetGrant().GetId(), got[2].GetAcquire().GetGrant().GetId()
	if g1 == "" || g2 == "" || g1 == g2 {
		t.Fatalf("grants %v and %v", got[1], got[2])
	}
	if got[3].GetReleaseGrants().GetNotFound() != 1 {
		t.Fatalf("release of an unknown grant: %v", got[3])
	}
	var s status.Status
	if err := proto.Unmarshal(got[4].GetError(), &s); err != nil || codes.Code(s.GetCode()) != codes.InvalidArgument {
		t.Fatalf("empty call: %v (%v), want InvalidArgument", got[4], err)
	}
	err = st.Send(&flowcontrolv1.DecideRequest{Calls: []*flowcontrolv1.DecideRequest{
		{Id: 5, Call: &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: []string{g1}}}},
		{Id: 6, Call: &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: []string{g2}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := answers(5, 6); got[5].GetReleaseGrants().GetReleased() != 1 || got[6].GetReleaseGrants().GetReleased() != 1 {
		t.Fatalf("releases %v", got)
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// Without the metadata: one answer per message.
	old, err := dsc.Decide(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 8; id++ {
		if err := old.Send(&flowcontrolv1.DecideRequest{Id: id, Call: &flowcontrolv1.DecideRequest_Acquire{Acquire: acquire(fmt.Sprint("user-", id))}}); err != nil {
			t.Fatal(err)
		}
	}
	var grants []string
	for range 8 {
		resp, err := old.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetAnswers()) != 0 || resp.GetAcquire().GetGrant().GetId() == "" {
			t.Fatalf("answer to a client without batches: %v", resp)
		}
		grants = append(grants, resp.GetAcquire().GetGrant().GetId())
	}
	if err := old.Send(&flowcontrolv1.DecideRequest{Id: 9, Call: &flowcontrolv1.DecideRequest_ReleaseGrants{ReleaseGrants: &flowcontrolv1.ReleaseGrantsRequest{GrantIds: grants}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := old.Recv(); err != nil || resp.GetReleaseGrants().GetReleased() != 8 {
		t.Fatalf("release: %v %v", resp, err)
	}
	if err := old.CloseSend(); err != nil {
		t.Fatal(err)
	}

	// decideclient's concurrent calls.
	dc, err := decideclient.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for range 20 {
				resp, err := dc.Acquire(ctx, acquire(fmt.Sprint("worker-", w)))
				if err == nil {
					_, err = dc.ReleaseGrants(ctx, []string{resp.GetGrant().GetId()})
				}
				if err != nil {
					errc <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if err := dc.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := flowcontrolv1.NewFlowControlServiceClient(conn).Dump(ctx, &flowcontrolv1.DumpRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range d.GetPriorityLevels() {
		if l.GetSeatsInUse() != 0 || l.GetWaiting() != 0 {
			t.Fatalf("level %s: %d seats in use, %d waiting at the end", l.GetName(), l.GetSeatsInUse(), l.GetWaiting())
		}
	}
}
