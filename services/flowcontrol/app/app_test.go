package app_test

import (
	"context"
	"net"
	"testing"
	"time"

	flowcontrolv1api "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/app"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// start serves the service on loopback and returns a plaintext connection
// to it and what Serve returns; at the end of the test it checks that
// Close (twice) and Serve return nil.
func start(t *testing.T, cfg app.Config) (*grpc.ClientConn, *daemontest.Served) {
	t.Helper()
	a, err := app.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := daemontest.Serve(t, a)
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := a.Close(); err != nil {
			t.Error(err)
		}
		if err := served.Wait(); err != nil {
			t.Errorf("Serve after Close: %v", err)
		}
	})
	conn, err := grpcclient.Dial(served.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, served
}

func acquire(ctx context.Context, c flowcontrolv1.FlowControlServiceClient, user string) (*flowcontrolv1.Grant, error) {
	resp, err := c.Acquire(ctx, &flowcontrolv1.AcquireRequest{
		GatewayId: "gw-1",
		Digest: &flowcontrolv1.RequestDigest{
			User: user, Groups: []string{"system:authenticated"}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
		},
	})
	return resp.GetGrant(), err
}

// tinyStore starts a store holding a FlowSchema "users" that sends
// every authenticated user to a PriorityLevelConfiguration "tiny" of
// one queue of one request, and returns its address. With a server
// concurrency limit of 1, tiny has one seat.
func tinyStore(t *testing.T) string {
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	st, err := storeclient.Dial([]string{member.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	res := registry.FlowControl()
	for i, obj := range []runtime.Object{
		&flowcontrolv1api.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "users", UID: "uid-users"}, Spec: flowcontrolv1api.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1api.PriorityLevelConfigurationReference{Name: "tiny"}, MatchingPrecedence: 500,
			DistinguisherMethod: &flowcontrolv1api.FlowDistinguisherMethod{Type: flowcontrolv1api.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1api.PolicyRulesWithSubjects{{
				Subjects:      []flowcontrolv1api.Subject{{Kind: flowcontrolv1api.SubjectKindGroup, Group: &flowcontrolv1api.GroupSubject{Name: "system:authenticated"}}},
				ResourceRules: []flowcontrolv1api.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}, ClusterScope: true}},
			}},
		}},
		&flowcontrolv1api.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "tiny", UID: "uid-tiny"}, Spec: flowcontrolv1api.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1api.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1api.LimitedPriorityLevelConfiguration{NominalConcurrencyShares: &one, LimitResponse: flowcontrolv1api.LimitResponse{
				Type: flowcontrolv1api.LimitResponseTypeQueue, Queuing: &flowcontrolv1api.QueuingConfiguration{Queues: 1, HandSize: 1, QueueLengthLimit: 1},
			}},
		}},
	} {
		value, err := c.EncodeStorage(obj)
		if err != nil {
			t.Fatal(err)
		}
		key := res[i].Key("", obj.(metav1.Object).GetName())
		if _, err := st.KV().Txn(t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
			RequestPut: &storev1.PutRequest{Key: []byte(key), Value: value},
		}}}}); err != nil {
			t.Fatal(err)
		}
	}
	return member.Addr
}

// TestOverGRPC: the service serves the stored configuration (tinyStore)
// over gRPC: grants with the objects' names and UIDs, queuing, RetryInfo
// on rejection, cancellation, release, heartbeats, exempt requests.
func TestOverGRPC(t *testing.T) {
	reg := prometheus.NewRegistry()
	conn, _ := start(t, app.Config{
		ConcurrencyLimit: 1, StoreAddress: tinyStore(t),
		RetryAfter: 3 * time.Second, Registerer: reg,
	})
	c := flowcontrolv1.NewFlowControlServiceClient(conn)
	ctx := t.Context()
	polltest.Until(t, 10*time.Second, "the stored configuration", func() bool {
		g, err := acquire(ctx, c, "someone")
		if err == nil {
			_, err = c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()})
		}
		return err == nil && g.GetFlowSchema() == "users"
	})

	hc := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", app.ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, resp, err)
		}
	}

	g, err := acquire(ctx, c, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if g.GetFlowSchema() != "users" || g.GetPriorityLevel() != "tiny" || g.GetSeats() != 1 ||
		g.GetId() == "" || g.GetFlowSchemaUid() != "uid-users" || g.GetPriorityLevelUid() != "uid-tiny" || g.GetQueueWait() == nil {
		t.Fatalf("grant %v", g)
	}

	// One request waits in the only queue; cancelling it removes it.
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error)
	go func() {
		_, err := acquire(cctx, c, "bob")
		errc <- err
	}()
	inQueue := func() float64 {
		return telemetrytest.Sum(t, reg, "apiserver_flowcontrol_current_inqueue_requests", nil)
	}
	polltest.Until(t, 5*time.Second, "a queued request", func() bool { return inQueue() == 1 })

	// The queue is full: the next request is rejected with RetryInfo.
	_, err = acquire(ctx, c, "carol")
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("queue full: %v, want ResourceExhausted", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry == nil || retry.GetRetryDelay().AsDuration() != 3*time.Second {
		t.Fatalf("RetryInfo %v in %v", retry, st.Details())
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			info = ei
		}
	}
	if md := info.GetMetadata(); md["flow_schema_uid"] != "uid-users" || md["priority_level_uid"] != "uid-tiny" || md["reason"] != "queue-full" {
		t.Fatalf("ErrorInfo %v, want the UIDs of users and tiny", info)
	}

	cancel()
	if err := <-errc; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled acquire: %v", err)
	}
	polltest.Until(t, 5*time.Second, "an empty queue", func() bool { return inQueue() == 0 })

	if _, err := c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("second release: %v, want NotFound", err)
	}
	hb, err := c.Heartbeat(ctx, &flowcontrolv1.HeartbeatRequest{GatewayId: "gw-1"})
	if err != nil || hb.GetInterval().AsDuration() != 15*time.Second {
		t.Fatalf("heartbeat: %v %v", hb, err)
	}

	// Exempt requests pass while tiny is full.
	if _, err := acquire(ctx, c, "dave"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Acquire(ctx, &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{
		User: "admin", Groups: []string{"system:masters"}, Verb: "list", Resource: "pods", IsResourceRequest: true,
	}})
	if err != nil || !resp.GetGrant().GetExempt() || resp.GetGrant().GetPriorityLevel() != "exempt" || resp.GetGrant().GetId() != "" {
		t.Fatalf("exempt: %v %v", resp, err)
	}

	for _, bad := range []*flowcontrolv1.AcquireRequest{
		{GatewayId: "gw-1"},
		{Digest: &flowcontrolv1.RequestDigest{User: "x"}},
	} {
		if _, err := c.Acquire(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("Acquire(%v): %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := c.Heartbeat(ctx, &flowcontrolv1.HeartbeatRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty heartbeat: %v", err)
	}
}

func TestReleaseGrants(t *testing.T) {
	conn, _ := start(t, app.Config{})
	c := flowcontrolv1.NewFlowControlServiceClient(conn)
	ctx := t.Context()
	a, err := acquire(ctx, c, "alice")
	if err != nil {
		t.Fatal(err)
	}
	b, err := acquire(ctx, c, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseGrants(ctx, &flowcontrolv1.ReleaseGrantsRequest{GrantIds: []string{a.GetId(), ""}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty id: %v, want InvalidArgument", err)
	}
	resp, err := c.ReleaseGrants(ctx, &flowcontrolv1.ReleaseGrantsRequest{GrantIds: []string{a.GetId(), b.GetId(), a.GetId(), "unknown"}})
	if err != nil || resp.GetReleased() != 2 || resp.GetNotFound() != 2 {
		t.Fatalf("release: %v %v, want 2 released and 2 not found", resp, err)
	}
	// Both seats are free again: two more requests run without queueing.
	for _, u := range []string{"carol", "dave"} {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		g, err := acquire(actx, c, u)
		cancel()
		if err != nil || g.GetQueueWait().AsDuration() > time.Second {
			t.Fatalf("acquire after release: %v %v", g, err)
		}
	}
}

func TestWatchExemptions(t *testing.T) {
	conn, served := start(t, app.Config{})
	c := flowcontrolv1.NewFlowControlServiceClient(conn)
	stream, err := c.WatchExemptions(t.Context(), &flowcontrolv1.WatchExemptionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ex := resp.GetExemptions()
	if len(ex) != 1 || ex[0].GetFlowSchema() != "exempt" || ex[0].GetPriorityLevel() != "exempt" ||
		len(ex[0].GetGroups()) != 1 || ex[0].GetGroups()[0] != "system:masters" || len(ex[0].GetUsers()) != 0 {
		t.Fatalf("exemptions %v", ex)
	}
	// They are what Acquire answers for those callers.
	g, err := c.Acquire(t.Context(), &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Digest: &flowcontrolv1.RequestDigest{
		User: "root", Groups: []string{"system:masters"}, Verb: "create", Resource: "secrets", Namespace: "x", IsResourceRequest: true,
	}})
	if err != nil || !g.GetGrant().GetExempt() || g.GetGrant().GetFlowSchemaUid() != ex[0].GetFlowSchemaUid() ||
		g.GetGrant().GetPriorityLevelUid() != ex[0].GetPriorityLevelUid() {
		t.Fatalf("acquire %v %v, exemption %v", g, err, ex[0])
	}

	// Close does not wait for the open stream; it ends UNAVAILABLE.
	served.CloseWithin(t, 10*time.Second)
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("stream after Close: %v, want Unavailable", err)
	}
	if err := served.Wait(); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := app.Config{ConcurrencyLimit: -1, MaxWait: -time.Second}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("bad config accepted")
	}
	t.Log(err)
	if _, err := app.New(t.Context(), cfg); err == nil {
		t.Fatal("New accepted a bad config")
	}
	if err := (&app.Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
}

// TestLeaderElection: two replicas on one store elect a leader; the
// other answers every call about seats UNAVAILABLE with a NOT_LEADER
// ErrorInfo naming it, and serves the exemptions. When the leader stops,
// the other takes the Lease at once (it was released) and serves from an
// empty table, in a term of another id; the gateway re-registers the
// old leader's grant there (AdoptGrants), which then holds the level's
// one seat until its release, once.
func TestLeaderElection(t *testing.T) {
	storeAddr := tinyStore(t)
	type replica struct {
		addr string
		app  *app.App
		c    flowcontrolv1.FlowControlServiceClient
	}
	var rs []*replica
	for _, lis := range []net.Listener{listen(t), listen(t)} {
		a, err := app.New(t.Context(), app.Config{
			ConcurrencyLimit: 1, StoreAddress: storeAddr,
			LeaderElect: true, Identity: lis.Addr().String(),
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		served := daemontest.ServeListener(t, a, lis)
		t.Cleanup(func() {
			if err := a.Close(); err != nil {
				t.Error(err)
			}
			if err := served.Wait(); err != nil {
				t.Error(err)
			}
		})
		conn, err := grpcclient.Dial(served.Addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		rs = append(rs, &replica{addr: served.Addr, app: a, c: flowcontrolv1.NewFlowControlServiceClient(conn)})
	}
	ctx := t.Context()
	var leader, follower *replica
	var grant *flowcontrolv1.Grant
	polltest.Until(t, 20*time.Second, "a leader serving the stored configuration", func() bool {
		for i, r := range rs {
			g, err := acquire(ctx, r.c, "someone")
			if err == nil && g.GetFlowSchema() == "users" {
				leader, follower, grant = r, rs[1-i], g
				return true
			}
			if err == nil {
				_, _ = r.c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()})
			}
		}
		return false
	})

	notLeader := func(what string, err error) {
		t.Helper()
		st := status.Convert(err)
		if st.Code() != codes.Unavailable {
			t.Fatalf("follower's %s: %v, want UNAVAILABLE", what, err)
		}
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "NOT_LEADER" && info.GetMetadata()["leader"] == leader.addr {
				return
			}
		}
		t.Fatalf("follower's %s: details %v, want NOT_LEADER naming %s", what, st.Details(), leader.addr)
	}
	// The follower names the leader once it has read the Lease.
	polltest.Until(t, 10*time.Second, "the follower names the leader", func() bool {
		_, err := acquire(ctx, follower.c, "someone")
		for _, d := range status.Convert(err).Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetMetadata()["leader"] != "" {
				return true
			}
		}
		return false
	})
	_, err := acquire(ctx, follower.c, "someone")
	notLeader("Acquire", err)
	_, err = follower.c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: grant.GetId()})
	notLeader("Release", err)
	_, err = follower.c.Heartbeat(ctx, &flowcontrolv1.HeartbeatRequest{GatewayId: "gw-1"})
	notLeader("Heartbeat", err)
	_, err = follower.c.Dump(ctx, &flowcontrolv1.DumpRequest{})
	notLeader("Dump", err)
	held := &flowcontrolv1.AdoptGrantsRequest{GatewayId: "gw-1", Grants: []*flowcontrolv1.HeldGrant{{
		Id: grant.GetId(), FlowSchema: grant.GetFlowSchema(), PriorityLevel: grant.GetPriorityLevel(), Seats: grant.GetSeats(),
	}}}
	_, err = follower.c.AdoptGrants(ctx, held)
	notLeader("AdoptGrants", err)
	hb, err := leader.c.Heartbeat(ctx, &flowcontrolv1.HeartbeatRequest{GatewayId: "gw-1"})
	if err != nil || hb.GetTerm() == "" {
		t.Fatalf("leader's heartbeat: %v, %v; want its term", hb, err)
	}
	stream, err := follower.c.WatchExemptions(ctx, &flowcontrolv1.WatchExemptionsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if ex, err := stream.Recv(); err != nil || len(ex.GetExemptions()) == 0 {
		t.Fatalf("follower's exemptions: %v, %v", ex, err)
	}

	// The leader's one seat is held; the leader stops.
	if err := leader.app.Close(); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the follower leads", func() bool {
		g, err := acquire(ctx, follower.c, "someone")
		if err != nil {
			return false
		}
		if _, err := follower.c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()}); err != nil {
			t.Fatal(err)
		}
		return true
	})
	adopted, err := follower.c.AdoptGrants(ctx, held)
	if err != nil || adopted.GetAdopted() != 1 {
		t.Fatalf("the old leader's grant re-registered with the new one: %v, %v", adopted, err)
	}
	if adopted.GetTerm() == "" || adopted.GetTerm() == hb.GetTerm() {
		t.Fatalf("the new leader's term %q, the old one's %q: want another", adopted.GetTerm(), hb.GetTerm())
	}
	tinySeats := func() uint32 {
		t.Helper()
		d, err := follower.c.Dump(ctx, &flowcontrolv1.DumpRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetPriorityLevels() {
			if l.GetName() == "tiny" {
				return l.GetSeatsInUse()
			}
		}
		t.Fatal("no level tiny")
		return 0
	}
	if n := tinySeats(); n != 1 {
		t.Fatalf("the new leader holds %d of tiny's seats with the old grant adopted, want 1", n)
	}
	if _, err := follower.c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: grant.GetId()}); err != nil {
		t.Fatalf("the adopted grant released on the new leader: %v", err)
	}
	if _, err := follower.c.Release(ctx, &flowcontrolv1.ReleaseRequest{GrantId: grant.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("the adopted grant released twice: %v, want NOT_FOUND", err)
	}
	if n := tinySeats(); n != 0 {
		t.Fatalf("the new leader holds %d of tiny's seats at the end, want 0", n)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

// TestAcquireOfAnotherTerm: an Acquire naming a term this service does
// not lead (a gateway that last heard the previous leader) is granted
// nothing: ABORTED with a NEW_TERM ErrorInfo naming the service's term,
// with which the same request is then granted; one naming no term (a
// gateway that has heard none) is granted.
func TestAcquireOfAnotherTerm(t *testing.T) {
	conn, _ := start(t, app.Config{})
	c := flowcontrolv1.NewFlowControlServiceClient(conn)
	ctx := t.Context()
	req := func(term string) *flowcontrolv1.AcquireRequest {
		return &flowcontrolv1.AcquireRequest{GatewayId: "gw-1", Term: term, Digest: &flowcontrolv1.RequestDigest{
			User: "alice", Groups: []string{"system:authenticated"}, Verb: "get",
			Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
		}}
	}
	first, err := c.Acquire(ctx, req(""))
	if err != nil || first.GetTerm() == "" {
		t.Fatalf("no term named: %v %v, want a grant naming the term", first, err)
	}
	_, err = c.Acquire(ctx, req("a-previous-term"))
	if status.Code(err) != codes.Aborted {
		t.Fatalf("another term: %v, want ABORTED", err)
	}
	var named string
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == "NEW_TERM" {
			named = info.GetMetadata()["term"]
		}
	}
	if named != first.GetTerm() {
		t.Fatalf("NEW_TERM names %q, want the service's term %q", named, first.GetTerm())
	}
	again, err := c.Acquire(ctx, req(named))
	if err != nil || again.GetGrant().GetId() == "" {
		t.Fatalf("with the service's term: %v %v, want a grant", again, err)
	}
	d, err := c.Dump(ctx, &flowcontrolv1.DumpRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var executing uint32
	for _, l := range d.GetPriorityLevels() {
		executing += l.GetExecuting()
	}
	if executing != 2 {
		t.Fatalf("%d requests executing, want 2: the refused one took no seat", executing)
	}
}
