package resources

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// failure is the Status a write must fail with: code, reason, and the
// message when it is the package's own wording ("" leaves it unchecked).
type failure struct {
	code    int32
	reason  metav1.StatusReason
	message string
}

// check compares err's Status with f (no error wanted when f is zero).
func (f failure) check(t *testing.T, err error) {
	t.Helper()
	if f.code == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("no error, want %d %s", f.code, f.reason)
	}
	st := statusOf(err)
	if st.Code != f.code || st.Reason != f.reason || f.message != "" && st.Message != f.message {
		t.Fatalf("got %d %s %q, want %d %s %q", st.Code, st.Reason, st.Message, f.code, f.reason, f.message)
	}
}

// TestCreate: the rules of a create — where the object goes (the
// namespace of the URL, a generated name), what the server sets, which
// namespaces accept it, and that a create that fails, or a dry run,
// stores nothing.
func TestCreate(t *testing.T) {
	e := newEnv(t, Config{})
	e.namespace("ns")
	e.namespace("ending")
	if _, err := e.s.Delete(t.Context(), &apiv1.DeleteRequest{Ref: namespaceRef("ending")}); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"taken"}}`)

	suffix := regexp.MustCompile(`^gen-[bcdfghjklmnpqrstvwxz2456789]{5}$`)
	for _, c := range []struct {
		name   string
		ref    *apiv1.ResourceRef
		body   *httpbody.HttpBody
		dryRun []string
		accept string
		want   failure
		// check looks at the object created (the response, which the
		// store holds unless it was a dry run).
		check func(t *testing.T, acc metav1.Object)
	}{
		{name: "the namespace of the URL", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"a"}}`),
			check: func(t *testing.T, acc metav1.Object) {
				if acc.GetNamespace() != "ns" || acc.GetName() != "a" {
					t.Errorf("created %s/%s", acc.GetNamespace(), acc.GetName())
				}
			}},
		{name: "a generated name", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"generateName":"gen-"}}`),
			check: func(t *testing.T, acc metav1.Object) {
				if !suffix.MatchString(acc.GetName()) || acc.GetGenerateName() != "gen-" {
					t.Errorf("generated name %q (generateName %q)", acc.GetName(), acc.GetGenerateName())
				}
			}},
		{name: "fields the server owns", ref: configMap("ns", ""),
			body: jsonBody(`{"metadata":{"name":"owned","uid":"mine","resourceVersion":"1","creationTimestamp":"2000-01-01T00:00:00Z","deletionTimestamp":"2000-01-01T00:00:00Z","deletionGracePeriodSeconds":3,"selfLink":"/x"}}`),
			check: func(t *testing.T, acc metav1.Object) {
				if acc.GetUID() == "mine" || acc.GetUID() == "" || acc.GetCreationTimestamp().Year() == 2000 ||
					acc.GetDeletionTimestamp() != nil || acc.GetDeletionGracePeriodSeconds() != nil || acc.GetSelfLink() != "" || acc.GetResourceVersion() == "1" {
					t.Errorf("the server's fields were taken from the body: %+v", acc)
				}
			}},
		{name: "a cluster-scoped object loses its namespace", ref: namespaceRef(""), body: jsonBody(`{"metadata":{"name":"scoped","namespace":"ns"}}`),
			check: func(t *testing.T, acc metav1.Object) {
				if acc.GetNamespace() != "" {
					t.Errorf("namespace %q", acc.GetNamespace())
				}
			}},
		{name: "a dry run", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"dry"}}`), dryRun: []string{"All"},
			check: func(t *testing.T, acc metav1.Object) {
				if acc.GetUID() == "" {
					t.Errorf("a dry run answers the object as it would be created: %+v", acc)
				}
			}},

		{name: "a name in the URL", ref: configMap("ns", "a"), body: jsonBody(`{"metadata":{"name":"a"}}`),
			want: failure{code: http.StatusMethodNotAllowed, reason: metav1.StatusReasonMethodNotAllowed}},
		{name: "no namespace", ref: configMap("", ""), body: jsonBody(`{"metadata":{"name":"a"}}`),
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, "a namespace is required to create a ConfigMap"}},
		{name: "another namespace in the body", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"a","namespace":"other"}}`),
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, "the namespace of the provided object does not match the namespace sent on the request"}},
		{name: "a missing namespace", ref: configMap("missing", ""), body: jsonBody(`{"metadata":{"name":"a"}}`),
			want: failure{http.StatusNotFound, metav1.StatusReasonNotFound, `namespaces "missing" not found`}},
		{name: "a namespace being deleted", ref: configMap("ending", ""), body: jsonBody(`{"metadata":{"name":"a"}}`),
			want: failure{http.StatusForbidden, metav1.StatusReasonForbidden, `configmaps "a" is forbidden: unable to create new content in namespace ending because it is being terminated`}},
		{name: "a name taken", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"taken"}}`),
			want: failure{http.StatusConflict, metav1.StatusReasonAlreadyExists, `configmaps "taken" already exists`}},
		{name: "an invalid name", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"Not_A_Name"}}`),
			want: failure{code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid}},
		{name: "no body", ref: configMap("ns", ""),
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, "the request body is empty"}},
		{name: "a body in another format", ref: configMap("ns", ""), body: &httpbody.HttpBody{ContentType: "text/plain", Data: []byte("a")},
			want: failure{code: http.StatusUnsupportedMediaType, reason: metav1.StatusReasonUnsupportedMediaType}},
		{name: "a malformed body", ref: configMap("ns", ""), body: jsonBody(`{"metadata":`),
			want: failure{code: http.StatusBadRequest, reason: metav1.StatusReasonBadRequest}},
		{name: "a dry run value not served", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"a"}}`), dryRun: []string{"Some"},
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, `Invalid dry run value: "Some": valid values are "All"`}},
		{name: "a response format not served", ref: configMap("ns", ""), body: jsonBody(`{"metadata":{"name":"a"}}`), accept: "text/html",
			want: failure{code: http.StatusNotAcceptable, reason: metav1.StatusReasonNotAcceptable}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.revision()
			b, code, err := call(t.Context(), func(ctx context.Context) (*httpbody.HttpBody, error) {
				return e.s.Create(ctx, &apiv1.CreateRequest{Ref: c.ref, Body: c.body, DryRun: c.dryRun, Accept: c.accept})
			})
			c.want.check(t, err)
			if err != nil || c.dryRun != nil {
				if after := e.revision(); after != before {
					t.Fatalf("the store changed (revision %d → %d)", before, after)
				}
			}
			if err != nil {
				return
			}
			if code != http.StatusCreated {
				t.Errorf("HTTP %d, want 201", code)
			}
			acc := accessor(t, e.decode(c.ref, b))
			c.check(t, acc)
			ref := proto.Clone(c.ref).(*apiv1.ResourceRef)
			ref.Name = acc.GetName()
			stored := e.stored(ref)
			if c.dryRun != nil {
				if stored != nil {
					t.Fatal("a dry run stored the object")
				}
				return
			}
			if stored == nil {
				t.Fatal("not stored")
			}
			if s := accessor(t, stored); s.GetUID() != acc.GetUID() || s.GetResourceVersion() != acc.GetResourceVersion() {
				t.Errorf("stored uid %s rv %s, answered uid %s rv %s", s.GetUID(), s.GetResourceVersion(), acc.GetUID(), acc.GetResourceVersion())
			}
		})
	}
}

// TestUpdate: the rules of an update — a resourceVersion in the body is a
// precondition (409 when stale), without one the update is unconditional,
// the URL names the object, the server keeps the fields it owns, and an
// update that changes nothing, a dry run and a failed update write
// nothing.
func TestUpdate(t *testing.T) {
	e := newEnv(t, Config{})
	for i, c := range []struct {
		name string
		// body is the update's body; %s in it is the object's
		// resourceVersion before the update.
		body   string
		url    string // the name in the URL; default "u"
		dryRun []string
		want   failure
		// writes: the update stores a new version (value "2").
		writes bool
	}{
		{name: "with the current resourceVersion", body: `{"metadata":{"name":"u","resourceVersion":"%s"},"data":{"k":"2"}}`, writes: true},
		{name: "without a resourceVersion", body: `{"metadata":{"name":"u"},"data":{"k":"2"}}`, writes: true},
		{name: "with a stale resourceVersion", body: `{"metadata":{"name":"u","resourceVersion":"1"},"data":{"k":"2"}}`,
			want: failure{http.StatusConflict, metav1.StatusReasonConflict, `Operation cannot be fulfilled on configmaps "u": ` + conflictMessage}},
		{name: "the same object", body: `{"metadata":{"name":"u"},"data":{"k":"1"}}`},
		{name: "the same object at its resourceVersion", body: `{"metadata":{"name":"u","resourceVersion":"%s"},"data":{"k":"1"}}`},
		{name: "a dry run", body: `{"metadata":{"name":"u"},"data":{"k":"2"}}`, dryRun: []string{"All"}},
		{name: "another name than the URL's", body: `{"metadata":{"name":"v"},"data":{"k":"2"}}`,
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, "the name of the object (v) does not match the name on the URL (u)"}},
		{name: "another namespace than the URL's", body: `{"metadata":{"name":"u","namespace":"other"},"data":{"k":"2"}}`,
			want: failure{http.StatusBadRequest, metav1.StatusReasonBadRequest, "the namespace of the provided object does not match the namespace sent on the request"}},
		{name: "a changed uid", body: `{"metadata":{"name":"u","uid":"other"},"data":{"k":"2"}}`,
			want: failure{code: http.StatusUnprocessableEntity, reason: metav1.StatusReasonInvalid}},
		{name: "a missing object", url: "missing", body: `{"metadata":{"name":"missing"},"data":{"k":"2"}}`,
			want: failure{http.StatusNotFound, metav1.StatusReasonNotFound, `configmaps "missing" not found`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Each case updates an object of its own, in a namespace of
			// its own so that names stay "u".
			ns := "ns" + strconv.Itoa(i)
			e.namespace(ns)
			old := e.mustCreate(configMap(ns, ""), `{"metadata":{"name":"u"},"data":{"k":"1"}}`)
			url := c.url
			if url == "" {
				url = "u"
			}
			body := strings.ReplaceAll(c.body, "%s", old.GetResourceVersion())
			before := e.revision()
			b, code, err := call(t.Context(), func(ctx context.Context) (*httpbody.HttpBody, error) {
				return e.s.Update(ctx, &apiv1.UpdateRequest{Ref: configMap(ns, url), Body: jsonBody(body), DryRun: c.dryRun})
			})
			c.want.check(t, err)
			after := e.revision()
			if wrote := after != before; wrote != c.writes {
				t.Fatalf("the store was written: %t (revision %d → %d), want %t", wrote, before, after, c.writes)
			}
			stored := e.stored(configMap(ns, "u")).(*corev1.ConfigMap)
			if err != nil {
				if stored.ResourceVersion != old.GetResourceVersion() || stored.Data["k"] != "1" {
					t.Errorf("a failed update changed the object: %+v", stored)
				}
				return
			}
			if code != http.StatusOK {
				t.Errorf("HTTP %d, want 200", code)
			}
			got := e.decode(configMap(ns, "u"), b).(*corev1.ConfigMap)
			switch {
			case c.writes:
				if got.Data["k"] != "2" || stored.Data["k"] != "2" || got.ResourceVersion != stored.ResourceVersion || got.ResourceVersion == old.GetResourceVersion() {
					t.Errorf("answered %s at %s, stored %s at %s (was at %s)", got.Data["k"], got.ResourceVersion, stored.Data["k"], stored.ResourceVersion, old.GetResourceVersion())
				}
			case c.dryRun != nil:
				if got.Data["k"] != "2" || stored.Data["k"] != "1" {
					t.Errorf("a dry run answered %q and stored %q", got.Data["k"], stored.Data["k"])
				}
			default: // nothing to change: the stored object, as it is
				if got.ResourceVersion != old.GetResourceVersion() || got.UID != old.GetUID() || stored.ResourceVersion != old.GetResourceVersion() {
					t.Errorf("an update that changes nothing answered rv %s, stored rv %s, want %s", got.ResourceVersion, stored.ResourceVersion, old.GetResourceVersion())
				}
			}
			if got.UID != old.GetUID() || !got.CreationTimestamp.Equal(ptr(old.GetCreationTimestamp())) {
				t.Errorf("the server's fields changed: uid %s → %s", old.GetUID(), got.UID)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
