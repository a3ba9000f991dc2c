package resources

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// recordingGuard records what it is asked and refuses config maps whose
// data holds "escalate".
type recordingGuard struct {
	mu    sync.Mutex
	calls []string
}

func (g *recordingGuard) GuardWrite(_ context.Context, res *registry.Resource, namespace, name string, obj, old runtime.Object) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	op := "create"
	if old != nil {
		op = "update"
	}
	g.calls = append(g.calls, op+" "+res.GVR.Resource+" "+namespace+"/"+name)
	if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Data["k"] == "escalate" {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, cm.Name, errorString("no"))
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// TestWriteGuard: the write guard is asked about every create and every
// update, whichever way it is made (create, update, each kind of patch,
// apply, dry run), with the request's namespace and name, before the write
// is validated; its refusal ends the write and stores nothing.
func TestWriteGuard(t *testing.T) {
	g := &recordingGuard{}
	e := newEnv(t, Config{WriteGuard: g})
	e.namespace("ns")
	ctx := t.Context()
	e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"cm"},"data":{"k":"v"}}`)
	force := true
	patch := func(typ, body string, dryRun ...string) error {
		req := &apiv1.PatchRequest{Ref: configMap("ns", "cm"), Body: &httpbody.HttpBody{ContentType: typ, Data: []byte(body)}, DryRun: dryRun}
		if typ == negotiation.ApplyPatchYAML {
			req.FieldManager, req.Force = "applier", &force
		}
		_, err := e.s.Patch(ctx, req)
		return err
	}
	for _, tc := range []struct {
		name string
		do   func(value string) error
		call string
	}{
		{"create", func(v string) error {
			_, err := e.create(configMap("ns", ""), `{"metadata":{"name":"other"},"data":{"k":"`+v+`"}}`)
			return err
		}, "create configmaps ns/"},
		{"update", func(v string) error {
			_, err := e.s.Update(ctx, &apiv1.UpdateRequest{Ref: configMap("ns", "cm"), Body: jsonBody(`{"metadata":{"name":"cm"},"data":{"k":"` + v + `"}}`)})
			return err
		}, "update configmaps ns/cm"},
		{"merge patch", func(v string) error { return patch(negotiation.MergePatch, `{"data":{"k":"`+v+`"}}`) }, "update configmaps ns/cm"},
		{"json patch", func(v string) error {
			return patch(negotiation.JSONPatch, `[{"op":"replace","path":"/data/k","value":"`+v+`"}]`)
		}, "update configmaps ns/cm"},
		{"apply", func(v string) error {
			return patch(negotiation.ApplyPatchYAML, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"`+v+`"}}`)
		}, "update configmaps ns/cm"},
		{"dry run", func(v string) error { return patch(negotiation.MergePatch, `{"data":{"k":"`+v+`"}}`, "All") }, "update configmaps ns/cm"},
	} {
		g.mu.Lock()
		g.calls = nil
		g.mu.Unlock()
		rev := e.revision()
		err := tc.do("escalate")
		if statusOf(err).Reason != metav1.StatusReasonForbidden {
			t.Errorf("%s: %v, want the guard's 403", tc.name, err)
		}
		if e.revision() != rev {
			t.Errorf("%s: a refused write was stored", tc.name)
		}
		g.mu.Lock()
		calls := strings.Join(g.calls, ";")
		g.mu.Unlock()
		if !strings.HasPrefix(calls, tc.call) {
			t.Errorf("%s: the guard was asked %q, want %q", tc.name, calls, tc.call)
		}
		if err := tc.do("fine-" + tc.name); err != nil {
			t.Errorf("%s allowed by the guard: %v", tc.name, err)
		}
	}
}
