package flowcontrolclient

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	flowcontrolapi "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// downService answers every Acquire UNAVAILABLE: the service is gone.
type downService struct {
	flowcontrolv1.FlowControlServiceClient
}

func (downService) Acquire(context.Context, *flowcontrolv1.AcquireRequest, ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	return nil, status.Error(codes.Unavailable, "connection refused")
}

// TestFallbackLimits: while the service does not answer, the gateway's
// own limiter applies the stored configuration: alice's one-seat Reject
// level admits one request at a time (429 with its FlowSchema's UID for
// the next), system:masters stays exempt, and a released seat serves
// again. Without a fallback the request is served without seats.
func TestFallbackLimits(t *testing.T) {
	local, err := apf.New(apf.Config{ServerConcurrencyLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	one, zero := int32(1), int32(0)
	pl := &flowcontrolapi.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "one-seat", UID: "uid-pl"},
		Spec: flowcontrolapi.PriorityLevelConfigurationSpec{Type: flowcontrolapi.PriorityLevelEnablementLimited, Limited: &flowcontrolapi.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: &one, LendablePercent: &zero, BorrowingLimitPercent: &zero,
			LimitResponse: flowcontrolapi.LimitResponse{Type: flowcontrolapi.LimitResponseTypeReject},
		}}}
	fs := &flowcontrolapi.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "alice", UID: "uid-fs"}, Spec: flowcontrolapi.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolapi.PriorityLevelConfigurationReference{Name: "one-seat"}, MatchingPrecedence: 100,
		Rules: []flowcontrolapi.PolicyRulesWithSubjects{{
			Subjects:      []flowcontrolapi.Subject{{Kind: flowcontrolapi.SubjectKindUser, User: &flowcontrolapi.UserSubject{Name: "alice"}}},
			ResourceRules: []flowcontrolapi.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}}},
		}},
	}}
	if err := local.Configure(append(apfbootstrap.FlowSchemas(), fs), append(apfbootstrap.PriorityLevels(), pl)); err != nil {
		t.Fatal(err)
	}
	c := New(downService{}, "gw", nil)
	c.SetFallback(local)
	alice := identity.WithUser(t.Context(), identity.User{Name: "alice", Groups: []string{"system:authenticated"}})
	list := func() *flowcontrolv1.RequestDigest {
		return &flowcontrolv1.RequestDigest{Verb: "list", Resource: "configmaps", Namespace: "default", IsResourceRequest: true}
	}
	first, err := c.Acquire(alice, list())
	if err != nil || first.FlowSchemaUID != "uid-fs" || first.PriorityLevelUID != "uid-pl" {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, err := c.Acquire(alice, list())
	if !apierrors.IsTooManyRequests(err) || second.FlowSchemaUID != "uid-fs" {
		t.Fatalf("second while the seat is held: %+v %v, want 429 from alice's FlowSchema", second, err)
	}
	admin := identity.WithUser(t.Context(), identity.User{Name: "root", Groups: []string{"system:masters"}})
	for range 10 {
		if _, err := c.Acquire(admin, list()); err != nil {
			t.Fatalf("system:masters throttled: %v", err)
		}
	}
	first.Release()
	first.Release() // once only
	third, err := c.Acquire(alice, list())
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	third.Release()

	open := New(downService{}, "gw", nil)
	for range 3 {
		if _, err := open.Acquire(alice, list()); err != nil {
			t.Fatalf("without a fallback: %v, want served", err)
		}
	}
}

// hungService counts Acquires and answers none until the call's context
// ends: a service that accepts calls and never decides.
type hungService struct {
	flowcontrolv1.FlowControlServiceClient
	calls chan *flowcontrolv1.RequestDigest
}

func (s hungService) Acquire(ctx context.Context, req *flowcontrolv1.AcquireRequest, _ ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	s.calls <- req.GetDigest()
	<-ctx.Done()
	return nil, status.FromContextError(ctx.Err()).Err()
}

// TestProbesExemptLocally: a probe that the local configuration sends to
// the exempt level is granted without asking the service, which here
// never answers, with the UIDs of the schema and level that exempt it;
// a non-resource request of a limited level (/version, a probe by POST,
// a probe once probes names a limited level) asks the service.
func TestProbesExemptLocally(t *testing.T) {
	local, err := apf.New(apf.Config{ServerConcurrencyLimit: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	if err := local.Configure(apfbootstrap.FlowSchemas(), apfbootstrap.PriorityLevels()); err != nil {
		t.Fatal(err)
	}
	svc := hungService{calls: make(chan *flowcontrolv1.RequestDigest, 10)}
	c := New(svc, "gw", nil)
	c.SetFallback(local)
	anonymous := identity.WithUser(t.Context(), identity.User{Name: "system:anonymous", Groups: []string{"system:unauthenticated"}})
	get := func(verb, path string) *flowcontrolv1.RequestDigest {
		return &flowcontrolv1.RequestDigest{Verb: verb, Path: path}
	}
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		g, err := c.Acquire(anonymous, get("get", path))
		if err != nil || g.FlowSchemaUID != apf.ObjectUID("flowschemas", "probes") || g.PriorityLevelUID != apf.ObjectUID("prioritylevelconfigurations", "exempt") {
			t.Errorf("GET %s: %+v %v, want the exempt grant of probes", path, g, err)
		}
		g.Release()
	}
	if len(svc.calls) != 0 {
		t.Fatalf("the service was asked %d times for probes", len(svc.calls))
	}

	asked := func(d *flowcontrolv1.RequestDigest, user context.Context) {
		t.Helper()
		ctx, cancel := context.WithCancel(user)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = c.Acquire(ctx, d)
		}()
		got := <-svc.calls
		cancel()
		<-done
		if got.GetPath() != d.GetPath() || got.GetVerb() != d.GetVerb() || got.GetIsResourceRequest() {
			t.Errorf("the service was asked for %v, want %s %s", got, d.GetVerb(), d.GetPath())
		}
	}
	asked(get("get", "/version"), anonymous)
	asked(get("post", "/healthz"), anonymous)

	// probes sends the probes to global-default: they ask the service.
	schemas := apfbootstrap.FlowSchemas()
	for _, fs := range schemas {
		if fs.Name == "probes" {
			fs.Spec.PriorityLevelConfiguration.Name = "global-default"
		}
	}
	if err := local.Configure(schemas, apfbootstrap.PriorityLevels()); err != nil {
		t.Fatal(err)
	}
	asked(get("get", "/readyz"), anonymous)
}
