package resources

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDelete: the rules of a delete — preconditions, propagation policies
// and finalizers decide whether an object goes at once, stays marked for
// deletion with the finalizers the policy asks for, or stays as it is (a
// failed delete, a dry run).
func TestDelete(t *testing.T) {
	e := newEnv(t, Config{})
	const (
		gone   = iota // removed; the answer is a Status
		marked        // kept with a deletionTimestamp; the answer is the object
		kept          // unchanged; nothing written
	)
	for i, c := range []struct {
		name       string
		finalizers string // the object's, as JSON
		// body is a DeleteOptions in JSON; %u and %s in it, and in
		// want.message, are the object's uid and resourceVersion.
		body        string
		contentType string
		policy      string
		dryRun      []string
		want        failure
		result      int
		// wantFinalizers are the finalizers of a marked object.
		wantFinalizers []string
	}{
		{name: "an object without finalizers", result: gone},
		{name: "a uid precondition met", body: `{"preconditions":{"uid":"%u"}}`, result: gone},
		{name: "a resourceVersion precondition met", body: `{"preconditions":{"resourceVersion":"%s"}}`, result: gone},
		{name: "a uid precondition not met", body: `{"preconditions":{"uid":"other"}}`, result: kept,
			want: failure{http.StatusConflict, metav1.StatusReasonConflict, `Operation cannot be fulfilled on configmaps "d": Precondition failed: UID in precondition: other, UID in object meta: %u`}},
		{name: "a resourceVersion precondition not met", body: `{"preconditions":{"resourceVersion":"1"}}`, result: kept,
			want: failure{http.StatusConflict, metav1.StatusReasonConflict, `Operation cannot be fulfilled on configmaps "d": Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: %s`}},
		{name: "Background", policy: "Background", result: gone},
		{name: "Orphan", policy: "Orphan", result: marked, wantFinalizers: []string{metav1.FinalizerOrphanDependents}},
		{name: "Foreground", policy: "Foreground", result: marked, wantFinalizers: []string{metav1.FinalizerDeleteDependents}},
		{name: "Orphan in the body", body: `{"propagationPolicy":"Orphan"}`, result: marked, wantFinalizers: []string{metav1.FinalizerOrphanDependents}},
		{name: "Foreground with finalizers", finalizers: `["example.com/hold"]`, policy: "Foreground", result: marked,
			wantFinalizers: []string{"example.com/hold", metav1.FinalizerDeleteDependents}},
		{name: "a policy not served", policy: "Sideways", result: kept,
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, `propagationPolicy: unsupported value "Sideways": supported values are Orphan, Background and Foreground`}},
		{name: "finalizers", finalizers: `["example.com/hold"]`, result: marked, wantFinalizers: []string{"example.com/hold"}},
		{name: "a dry run", dryRun: []string{"All"}, result: kept},
		{name: "a dry run in the body", body: `{"dryRun":["All"]}`, result: kept},
		{name: "a dry run of an object with finalizers", finalizers: `["example.com/hold"]`, dryRun: []string{"All"}, result: kept},
		{name: "a DeleteOptions in another format", body: `a`, contentType: "text/plain", result: kept,
			want: failure{code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType}},
		{name: "a malformed DeleteOptions", body: `{"preconditions":`, result: kept,
			want: failure{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := "ns" + strconv.Itoa(i)
			e.namespace(ns)
			fin := c.finalizers
			if fin == "" {
				fin = "[]"
			}
			old := e.mustCreate(configMap(ns, ""), `{"metadata":{"name":"d","finalizers":`+fin+`}}`)
			fill := strings.NewReplacer("%u", string(old.GetUID()), "%s", old.GetResourceVersion()).Replace
			var body *httpbody.HttpBody
			if c.body != "" {
				ct := c.contentType
				if ct == "" {
					ct = "application/json"
				}
				body = &httpbody.HttpBody{ContentType: ct, Data: []byte(fill(c.body))}
			}
			c.want.message = fill(c.want.message)
			before := e.revision()
			b, code, err := call(t.Context(), func(ctx context.Context) (*httpbody.HttpBody, error) {
				return e.s.Delete(ctx, &apiv1.DeleteRequest{Ref: configMap(ns, "d"), Body: body, PropagationPolicy: c.policy, DryRun: c.dryRun})
			})
			c.want.check(t, err)
			if err == nil && code != http.StatusOK {
				t.Errorf("HTTP %d, want 200", code)
			}
			stored := e.stored(configMap(ns, "d"))
			switch c.result {
			case gone:
				var st metav1.Status
				if err := json.Unmarshal(b.GetData(), &st); err != nil || st.Status != metav1.StatusSuccess || st.Details == nil ||
					st.Details.Name != "d" || st.Details.Kind != "configmaps" || st.Details.UID != old.GetUID() {
					t.Errorf("answered %s (%v), want a Success Status naming the object", b.GetData(), err)
				}
				if stored != nil {
					t.Error("the object is still stored")
				}
			case marked:
				got := accessor(t, e.decode(configMap(ns, "d"), b))
				s := accessor(t, stored)
				if s.GetDeletionTimestamp() == nil || s.GetDeletionGracePeriodSeconds() == nil || *s.GetDeletionGracePeriodSeconds() != 0 {
					t.Errorf("stored deletionTimestamp %v, deletionGracePeriodSeconds %v; want set, 0", s.GetDeletionTimestamp(), s.GetDeletionGracePeriodSeconds())
				}
				if !slices.Equal(s.GetFinalizers(), c.wantFinalizers) {
					t.Errorf("stored finalizers %v, want %v", s.GetFinalizers(), c.wantFinalizers)
				}
				if got.GetResourceVersion() != s.GetResourceVersion() || !slices.Equal(got.GetFinalizers(), s.GetFinalizers()) {
					t.Errorf("answered rv %s %v, stored rv %s %v", got.GetResourceVersion(), got.GetFinalizers(), s.GetResourceVersion(), s.GetFinalizers())
				}
			case kept:
				if after := e.revision(); after != before {
					t.Errorf("the store changed (revision %d → %d)", before, after)
				}
				if stored == nil {
					t.Error("the object is gone")
				}
			}
		})
	}
}

// TestFinalizersHoldAnObject: an object with finalizers stays until the
// update that takes the last one away, which removes it; deleting it again
// meanwhile writes nothing unless it adds a finalizer.
func TestFinalizersHoldAnObject(t *testing.T) {
	e := newEnv(t, Config{})
	e.namespace("ns")
	e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"held","finalizers":["example.com/a","example.com/b"]}}`)
	del := func(policy string) metav1.Object {
		t.Helper()
		b, err := e.s.Delete(t.Context(), &apiv1.DeleteRequest{Ref: configMap("ns", "held"), PropagationPolicy: policy})
		if err != nil {
			t.Fatal(err)
		}
		return accessor(t, e.decode(configMap("ns", "held"), b))
	}
	update := func(finalizers string) {
		t.Helper()
		if _, err := e.s.Update(t.Context(), &apiv1.UpdateRequest{Ref: configMap("ns", "held"),
			Body: jsonBody(`{"metadata":{"name":"held","finalizers":` + finalizers + `}}`)}); err != nil {
			t.Fatal(err)
		}
	}

	first := del("")
	if first.GetDeletionTimestamp() == nil {
		t.Fatal("not marked for deletion")
	}
	rev := e.revision()
	again := del("")
	if e.revision() != rev || again.GetResourceVersion() != first.GetResourceVersion() || !again.GetDeletionTimestamp().Equal(first.GetDeletionTimestamp()) {
		t.Errorf("deleting an object being deleted wrote it: rv %s → %s", first.GetResourceVersion(), again.GetResourceVersion())
	}
	orphan := del("Orphan")
	if !slices.Equal(orphan.GetFinalizers(), []string{"example.com/a", "example.com/b", metav1.FinalizerOrphanDependents}) || !orphan.GetDeletionTimestamp().Equal(first.GetDeletionTimestamp()) {
		t.Errorf("Orphan on an object being deleted: finalizers %v, deletionTimestamp %v (was %v)", orphan.GetFinalizers(), orphan.GetDeletionTimestamp(), first.GetDeletionTimestamp())
	}
	update(`["example.com/b","orphan"]`)
	if e.stored(configMap("ns", "held")) == nil {
		t.Fatal("removed while it has finalizers")
	}
	update(`[]`)
	if e.stored(configMap("ns", "held")) != nil {
		t.Fatal("still stored without finalizers")
	}
}

// TestDeleteNamespace: a namespace turns Terminating and stays, held by
// its spec finalizer (the namespace controller's), and the system
// namespaces may not be deleted.
func TestDeleteNamespace(t *testing.T) {
	e := newEnv(t, Config{})
	e.namespace("doomed")
	b, err := e.s.Delete(t.Context(), &apiv1.DeleteRequest{Ref: namespaceRef("doomed")})
	if err != nil {
		t.Fatal(err)
	}
	answered := e.decode(namespaceRef("doomed"), b).(*corev1.Namespace)
	stored, _ := e.stored(namespaceRef("doomed")).(*corev1.Namespace)
	for what, ns := range map[string]*corev1.Namespace{"answered": answered, "stored": stored} {
		if ns == nil || ns.Status.Phase != corev1.NamespaceTerminating || ns.DeletionTimestamp == nil ||
			!slices.Equal(ns.Spec.Finalizers, []corev1.FinalizerName{corev1.FinalizerKubernetes}) {
			t.Errorf("%s: %+v, want Terminating, held by the kubernetes finalizer", what, ns)
		}
	}
	for _, name := range []string{"default", "kube-system", "kube-public"} {
		_, err := e.s.Delete(t.Context(), &apiv1.DeleteRequest{Ref: namespaceRef(name)})
		failure{http.StatusForbidden, metav1.StatusReasonForbidden, `namespaces "` + name + `" is forbidden: this namespace may not be deleted`}.check(t, err)
	}
}

// TestDeleteCollection: a collection delete deletes what its selectors
// match, each as a delete would, never a system namespace; the collection
// of a namespaced kind is one namespace's (405 without one).
func TestDeleteCollection(t *testing.T) {
	e := newEnv(t, Config{})
	for _, ns := range []string{"default", "ns", "other"} {
		e.namespace(ns)
	}
	for _, ns := range []string{"ns", "other"} {
		e.mustCreate(configMap(ns, ""), `{"metadata":{"name":"match","labels":{"app":"x"}}}`)
		e.mustCreate(configMap(ns, ""), `{"metadata":{"name":"held","labels":{"app":"x"},"finalizers":["example.com/hold"]}}`)
		e.mustCreate(configMap(ns, ""), `{"metadata":{"name":"other","labels":{"app":"y"}}}`)
	}
	deleteCollection := func(ref *apiv1.ResourceRef, labels string, dryRun []string) ([]string, error) {
		b, err := e.s.DeleteCollection(t.Context(), &apiv1.DeleteCollectionRequest{Ref: ref, LabelSelector: labels, DryRun: dryRun})
		if err != nil {
			return nil, err
		}
		var list metav1.PartialObjectMetadataList
		if err := json.Unmarshal(b.GetData(), &list); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, item := range list.Items {
			names = append(names, item.Name)
		}
		return names, nil
	}
	exists := func(ref *apiv1.ResourceRef) bool { return e.stored(ref) != nil }

	before := e.revision()
	_, err := deleteCollection(configMap("", ""), "app=x", nil)
	failure{code: http.StatusMethodNotAllowed, reason: metav1.StatusReasonMethodNotAllowed}.check(t, err)
	if names, err := deleteCollection(configMap("ns", ""), "app=x", []string{"All"}); err != nil || !slices.Equal(names, []string{"held", "match"}) {
		t.Errorf("dry run: %v %v, want [held match]", names, err)
	}
	if e.revision() != before {
		t.Fatal("a refused or dry-run collection delete wrote")
	}

	names, err := deleteCollection(configMap("ns", ""), "app=x", nil)
	if err != nil || !slices.Equal(names, []string{"held", "match"}) {
		t.Errorf("deleted %v %v, want [held match]", names, err)
	}
	if exists(configMap("ns", "match")) || !exists(configMap("ns", "held")) || !exists(configMap("ns", "other")) || !exists(configMap("other", "match")) {
		t.Error("deleted other objects than the namespace's matching ones, or a held one at once")
	}
	if names, err := deleteCollection(namespaceRef(""), "", nil); err != nil || slices.Contains(names, "default") || !exists(namespaceRef("default")) {
		t.Errorf("deleted namespaces %v %v: the system namespace default must stay", names, err)
	}
}
