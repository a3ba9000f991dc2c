package apfconfig

import (
	"context"
	"strings"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
)

var admin = identity.User{Name: "system:apiserver", Groups: []string{"system:masters", "system:authenticated"}}

type env struct {
	t       *testing.T
	api     *resourcestest.API
	ctx     context.Context
	schemas *Controller
}

// start runs a controller over a fresh store; interval is its
// maintenance period.
func start(t *testing.T, interval time.Duration) *env {
	api := resourcestest.Start(t)
	c, err := New(Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server, User: admin,
		Logger: api.Logger, Interval: interval, Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reconciletest.Run(t, c.Run)
	return &env{t: t, api: api, ctx: identity.WithUser(t.Context(), admin), schemas: c}
}

func (e *env) fs(name string) *flowcontrolv1.FlowSchema {
	obj := storagetest.Object(e.t, e.api.Store, e.api.Codec, e.schemas.schemas, "", name)
	if obj == nil {
		return nil
	}
	return obj.(*flowcontrolv1.FlowSchema)
}

func (e *env) pl(name string) *flowcontrolv1.PriorityLevelConfiguration {
	obj := storagetest.Object(e.t, e.api.Store, e.api.Codec, e.schemas.levels, "", name)
	if obj == nil {
		return nil
	}
	return obj.(*flowcontrolv1.PriorityLevelConfiguration)
}

func danglingStatus(fs *flowcontrolv1.FlowSchema) string {
	if fs == nil {
		return "no object"
	}
	for _, c := range fs.Status.Conditions {
		if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
			return string(c.Status) + "/" + c.Reason
		}
	}
	return "none"
}

// TestBootstrap: every mandatory and suggested object is created with
// upstream's spec and annotation, and every FlowSchema says its priority
// level exists.
func TestBootstrap(t *testing.T) {
	e := start(t, time.Hour)
	polltest.Until(t, 10*time.Second, "every FlowSchema to be created with its Dangling condition", func() bool {
		for _, want := range apfbootstrap.FlowSchemas() {
			if danglingStatus(e.fs(want.Name)) != "False/Found" {
				return false
			}
		}
		return true
	})
	for _, want := range apfbootstrap.PriorityLevels() {
		got := e.pl(want.Name)
		if got == nil || got.Annotations[apfbootstrap.AutoUpdateAnnotation] != "true" || got.Generation != 1 {
			t.Fatalf("priority level %s: %+v", want.Name, got)
		}
		if _, changed := apfbootstrap.MaintainPriorityLevel(got, want); changed {
			t.Errorf("priority level %s stored with spec %+v, want %+v", want.Name, got.Spec, want.Spec)
		}
	}
	wl := e.pl("workload-low")
	if q := wl.Spec.Limited.LimitResponse.Queuing; *wl.Spec.Limited.NominalConcurrencyShares != 100 || *wl.Spec.Limited.LendablePercent != 90 || q.Queues != 128 || q.HandSize != 6 {
		t.Errorf("workload-low: %+v", wl.Spec.Limited)
	}
	if p := e.fs("system-leader-election"); p.Spec.MatchingPrecedence != 100 || p.Spec.DistinguisherMethod.Type != flowcontrolv1.FlowDistinguisherMethodByUserType {
		t.Errorf("system-leader-election: %+v", p.Spec)
	}
}

// update changes a stored object through the API as a user would.
func update[T runtime.Object](e *env, res string, name string, f func(T)) error {
	r := e.schemas.schemas
	if res == "prioritylevelconfigurations" {
		r = e.schemas.levels
	}
	_, err := e.api.Server.UpdateObject(e.ctx, r, reconcile.Ref(r, "", name, ""), func(old runtime.Object) (runtime.Object, error) {
		out := old.DeepCopyObject().(T)
		f(out)
		return out, nil
	})
	return err
}

// TestMaintenance: a suggested object the servers own is restored, one
// annotated autoupdate-spec=false is the user's, a deleted mandatory one
// comes back, a mandatory one's spec cannot be changed (422), and an
// object the servers claim but do not suggest is deleted.
func TestMaintenance(t *testing.T) {
	e := start(t, 200*time.Millisecond)
	polltest.Until(t, 10*time.Second, "the bootstrap objects", func() bool { return danglingStatus(e.fs("global-default")) == "False/Found" })

	// Owned by the servers: changed back.
	if err := update(e, "flowschemas", "service-accounts", func(fs *flowcontrolv1.FlowSchema) { fs.Spec.MatchingPrecedence = 7000 }); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "service-accounts to be restored", func() bool { return e.fs("service-accounts").Spec.MatchingPrecedence == 9000 })

	// Owned by the user: kept.
	if err := update(e, "prioritylevelconfigurations", "workload-low", func(pl *flowcontrolv1.PriorityLevelConfiguration) {
		pl.Annotations[apfbootstrap.AutoUpdateAnnotation] = "false"
		pl.Spec.Limited.NominalConcurrencyShares = new(int32(7))
	}); err != nil {
		t.Fatal(err)
	}
	// Without the annotation and changed since it was created: the user's,
	// and the annotation says so.
	if err := update(e, "flowschemas", "kube-scheduler", func(fs *flowcontrolv1.FlowSchema) {
		delete(fs.Annotations, apfbootstrap.AutoUpdateAnnotation)
		fs.Spec.MatchingPrecedence = 850
	}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "kube-scheduler to be marked the user's", func() bool {
		return e.fs("kube-scheduler").Annotations[apfbootstrap.AutoUpdateAnnotation] == "false"
	})
	if got := e.fs("kube-scheduler").Spec.MatchingPrecedence; got != 850 {
		t.Errorf("kube-scheduler precedence %d, want the user's 850", got)
	}
	if got := *e.pl("workload-low").Spec.Limited.NominalConcurrencyShares; got != 7 {
		t.Errorf("workload-low shares %d, want the user's 7", got)
	}

	// Mandatory: a changed spec is refused.
	err := update(e, "flowschemas", "catch-all", func(fs *flowcontrolv1.FlowSchema) { fs.Spec.MatchingPrecedence = 9999 })
	if !apierrors.IsInvalid(err) || err.Error() == "" {
		t.Fatalf("changing catch-all's spec: %v, want 422", err)
	}
	if got := err.Error(); !strings.Contains(got, "spec of 'catch-all' must equal the fixed value") {
		t.Errorf("message %q", got)
	}
	// exempt's spec.exempt is the user's.
	if err := update(e, "prioritylevelconfigurations", "exempt", func(pl *flowcontrolv1.PriorityLevelConfiguration) {
		pl.Spec.Exempt.NominalConcurrencyShares = new(int32(3))
	}); err != nil {
		t.Fatal(err)
	}
	// Mandatory: deleted, recreated.
	ref := &apiv1.ResourceRef{Group: flowcontrolv1.GroupName, Version: "v1", Resource: "flowschemas", Name: "exempt"}
	if _, err := e.api.Server.DeleteObject(e.ctx, e.schemas.schemas, ref, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "exempt to be recreated", func() bool { return e.fs("exempt") != nil })
	if got := *e.pl("exempt").Spec.Exempt.NominalConcurrencyShares; got != 3 {
		t.Errorf("exempt's shares %d, want the user's 3", got)
	}

	// Claimed by the servers, not suggested: deleted. A user's own stays.
	for _, owner := range []string{"true", "false"} {
		fs := apfbootstrap.SuggestedFlowSchemas()[0].DeepCopy()
		fs.Name = "stale-" + owner
		fs.Annotations[apfbootstrap.AutoUpdateAnnotation] = owner
		if _, err := e.api.Server.CreateObject(e.ctx, e.schemas.schemas, fs); err != nil {
			t.Fatal(err)
		}
	}
	polltest.Until(t, 10*time.Second, "stale-true to be deleted", func() bool { return e.fs("stale-true") == nil })
	if e.fs("stale-false") == nil {
		t.Error("the user's stale-false was deleted")
	}
}

// TestDangling: a FlowSchema naming a missing priority level is Dangling
// until the level is created.
func TestDangling(t *testing.T) {
	e := start(t, time.Hour)
	fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "mine"},
		Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
			Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: "alice"}}},
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		}},
	}}
	if _, err := e.api.Server.CreateObject(e.ctx, e.schemas.schemas, fs); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "mine to be Dangling", func() bool { return danglingStatus(e.fs("mine")) == "True/NotFound" })
	if got := e.fs("mine"); got.Spec.MatchingPrecedence != 1000 {
		t.Errorf("matchingPrecedence %d, want the default 1000", got.Spec.MatchingPrecedence)
	}
	pl := &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
		Type: flowcontrolv1.PriorityLevelEnablementLimited,
		Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &flowcontrolv1.QueuingConfiguration{}},
		},
	}}
	if _, err := e.api.Server.CreateObject(e.ctx, e.schemas.levels, pl); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "mine not to be Dangling", func() bool { return danglingStatus(e.fs("mine")) == "False/Found" })
	got := e.pl("mine").Spec.Limited
	if *got.NominalConcurrencyShares != 30 || got.LimitResponse.Queuing.Queues != 64 || got.LimitResponse.Queuing.HandSize != 8 || got.LimitResponse.Queuing.QueueLengthLimit != 50 {
		t.Errorf("defaults: %+v %+v", got, got.LimitResponse.Queuing)
	}
}
