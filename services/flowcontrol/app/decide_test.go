package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
)

// TestDecideStream: the calls of a Decide stream are answered as the
// unary ones: a grant, a queued request that leaves its queue when its
// caller gives up, a rejection with RetryInfo and the UIDs, releases
// counted, a bad call refused; and the seats end at zero.
func TestDecideStream(t *testing.T) {
	reg := prometheus.NewRegistry()
	conn, _ := start(t, app.Config{
		ConcurrencyLimit: 1, StoreAddress: tinyStore(t),
		RetryAfter: 3 * time.Second, Registerer: reg,
	})
	c := flowcontrolv1.NewFlowControlServiceClient(conn)
	ctx := t.Context()
	dc, err := decideclient.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	req := func(user string) *flowcontrolv1.AcquireRequest {
		return &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{
			User: user, Groups: []string{"system:authenticated"}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
		}}
	}
	var g *flowcontrolv1.Grant
	polltest.Until(t, 10*time.Second, "the stored configuration", func() bool {
		resp, err := dc.Acquire(ctx, req("alice"))
		if err != nil {
			t.Fatal(err)
		}
		if g = resp.GetGrant(); g.GetFlowSchema() == "users" {
			return true
		}
		_, err = dc.ReleaseGrants(ctx, []string{g.GetId()})
		return err != nil
	})
	if g.GetPriorityLevel() != "tiny" || g.GetSeats() != 1 || g.GetId() == "" || g.GetPriorityLevelUid() != "uid-tiny" {
		t.Fatalf("grant %v", g)
	}

	// bob waits in tiny's only queue; carol finds it full.
	bctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() {
		_, err := dc.Acquire(bctx, req("bob"))
		errc <- err
	}()
	inQueue := func() float64 {
		return telemetrytest.Sum(t, reg, "apiserver_flowcontrol_current_inqueue_requests", nil)
	}
	polltest.Until(t, 5*time.Second, "a queued request", func() bool { return inQueue() == 1 })
	_, err = dc.Acquire(ctx, req("carol"))
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("queue full: %v, want ResourceExhausted", err)
	}
	var retry *errdetails.RetryInfo
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			retry = d
		case *errdetails.ErrorInfo:
			info = d
		}
	}
	if retry.GetRetryDelay().AsDuration() != 3*time.Second || info.GetMetadata()["priority_level_uid"] != "uid-tiny" || info.GetMetadata()["reason"] != "queue-full" {
		t.Fatalf("rejection details %v", st.Details())
	}
	cancel()
	if err := <-errc; err != context.Canceled {
		t.Fatalf("cancelled acquire: %v", err)
	}
	polltest.Until(t, 5*time.Second, "an empty queue", func() bool { return inQueue() == 0 })

	resp, err := dc.ReleaseGrants(ctx, []string{g.GetId()})
	if err != nil || resp.GetReleased() != 1 {
		t.Fatalf("release: %v %v", resp, err)
	}
	if resp, err := dc.ReleaseGrants(ctx, []string{g.GetId()}); err != nil || resp.GetNotFound() != 1 {
		t.Fatalf("second release: %v %v, want one not found", resp, err)
	}
	if _, err := dc.ReleaseGrants(ctx, []string{""}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty grant id: %v, want InvalidArgument", err)
	}
	if _, err := dc.Acquire(ctx, &flowcontrolv1.AcquireRequest{GatewayId: "gw-1"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no digest: %v, want InvalidArgument", err)
	}
	if err := dc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Acquire(ctx, req("dave")); err == nil {
		t.Fatal("an Acquire on a closed stream succeeded")
	}
	d, err := c.Dump(ctx, &flowcontrolv1.DumpRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range d.GetPriorityLevels() {
		if l.GetSeatsInUse() != 0 || l.GetWaiting() != 0 {
			t.Fatalf("level %s: %d seats in use, %d waiting at the end", l.GetName(), l.GetSeatsInUse(), l.GetWaiting())
		}
	}
}

// TestDecideStreamEndsOnClose: a gateway's Decide stream does not hold
// the service's shutdown: Close ends it with UNAVAILABLE, and a request
// queued on it leaves its queue with the same answer.
func TestDecideStreamEndsOnClose(t *testing.T) {
	a, err := app.New(t.Context(), app.Config{ConcurrencyLimit: 1, StoreAddress: tinyStore(t)})
	if err != nil {
		t.Fatal(err)
	}
	served := daemontest.Serve(t, a)
	conn, err := grpcclient.Dial(served.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	dc, err := decideclient.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	req := func(user string) *flowcontrolv1.AcquireRequest {
		return &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{
			User: user, Groups: []string{"system:authenticated"}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
		}}
	}
	polltest.Until(t, 10*time.Second, "the stored configuration", func() bool {
		resp, err := dc.Acquire(ctx, req("alice"))
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetGrant().GetPriorityLevel() == "tiny" {
			return true
		}
		_, err = dc.ReleaseGrants(ctx, []string{resp.GetGrant().GetId()})
		return err != nil
	})
	errc := make(chan error, 1)
	go func() {
		_, err := dc.Acquire(ctx, req("bob")) // queued behind alice
		errc <- err
	}()
	polltest.Until(t, 5*time.Second, "a queued request", func() bool {
		d, err := flowcontrolv1.NewFlowControlServiceClient(conn).Dump(ctx, &flowcontrolv1.DumpRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetPriorityLevels() {
			if l.GetName() == "tiny" {
				return l.GetWaiting() == 1
			}
		}
		return false
	})
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a Decide stream was open")
	}
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Fatalf("queued Acquire at shutdown: %v, want Unavailable", err)
	}
	if err := served.Wait(); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}
