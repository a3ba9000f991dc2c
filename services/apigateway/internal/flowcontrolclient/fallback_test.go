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
