package audit

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// memorySink keeps the events written to it, decoded.
type memorySink struct {
	mu     sync.Mutex
	lines  []string
	closed bool
}

func (m *memorySink) Write(ev []byte) {
	m.mu.Lock()
	m.lines = append(m.lines, string(ev))
	m.mu.Unlock()
}

func (m *memorySink) Close() error { m.closed = true; return nil }

func (m *memorySink) events(t *testing.T) []auditv1.Event {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []auditv1.Event
	for _, l := range m.lines {
		if !strings.HasSuffix(l, "\n") || strings.Count(l, "\n") != 1 {
			t.Fatalf("an event is not one line: %q", l)
		}
		var ev auditv1.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

func newTestAuditor(t *testing.T, policy string) (*Auditor, *memorySink) {
	t.Helper()
	sink := &memorySink{}
	a, err := NewAuditor(mustPolicy(t, policy), nil, nil, nil, sink)
	if err != nil {
		t.Fatal(err)
	}
	return a, sink
}

const everythingAtRequestResponse = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n"

func stagesOf(evs []auditv1.Event) string {
	var s []string
	for _, ev := range evs {
		s = append(s, string(ev.Stage))
	}
	return strings.Join(s, ",")
}

// TestEventOfACreate follows a create through its stages: the request and
// response objects, the object reference from the body, the annotations,
// the impersonated user.
func TestEventOfACreate(t *testing.T) {
	a, sink := newTestAuditor(t, everythingAtRequestResponse)
	attrs := resourceAttrs("alice", []string{"dev"}, "create", "", "configmaps", "", "team", "")
	r := a.Begin(attrs, Meta{AuditID: "id-1", RequestURI: "/api/v1/namespaces/team/configmaps", UserAgent: "kubectl", SourceIPs: []string{"10.0.0.1"}, Received: time.Now()})
	r.SetImpersonatedUser(resourceAttrs("bob", nil, "", "", "", "", "", "").User)
	AnnotateDecision(r, true, "")
	r.AddAnnotation("policy/checked", "yes")
	r.SetRequestObject([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"team"},"data":{"k":"v"}}`), "application/json")
	r.ResponseHeader(201, "application/json")
	r.ResponseBody([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","uid":"u-1",`))
	r.ResponseBody([]byte(`"resourceVersion":"7"},"data":{"k":"v"}}`))
	r.Complete(201)
	r.Complete(201) // once only
	evs := sink.events(t)
	if stagesOf(evs) != "RequestReceived,ResponseComplete" {
		t.Fatalf("stages %s", stagesOf(evs))
	}
	if evs[0].RequestObject != nil || evs[0].ResponseStatus != nil {
		t.Errorf("RequestReceived has what came later: %+v", evs[0])
	}
	ev := evs[1]
	if ev.AuditID != "id-1" || ev.Verb != "create" || ev.User.Username != "alice" || ev.ImpersonatedUser == nil || ev.ImpersonatedUser.Username != "bob" ||
		ev.ObjectRef.Name != "cm" || ev.ObjectRef.Namespace != "team" || ev.ResponseStatus.Code != 201 || ev.UserAgent != "kubectl" ||
		ev.Annotations[DecisionAnnotation] != "allow" || ev.Annotations["policy/checked"] != "yes" || ev.SourceIPs[0] != "10.0.0.1" {
		t.Errorf("event: %+v", ev)
	}
	if !strings.Contains(string(ev.RequestObject.Raw), `"data":{"k":"v"}`) || !strings.Contains(string(ev.ResponseObject.Raw), `"uid":"u-1"`) {
		t.Errorf("objects: %s / %s", ev.RequestObject.Raw, ev.ResponseObject.Raw)
	}
}

// TestLevels: Metadata records no objects, Request the request's only,
// RequestResponse both; None writes nothing.
func TestLevels(t *testing.T) {
	for _, c := range []struct {
		level         auditv1.Level
		request, resp bool
	}{
		{auditv1.LevelNone, false, false},
		{auditv1.LevelMetadata, false, false},
		{auditv1.LevelRequest, true, false},
		{auditv1.LevelRequestResponse, true, true},
	} {
		a, sink := newTestAuditor(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: "+string(c.level)+"\n")
		r := a.Begin(resourceAttrs("alice", nil, "update", "", "configmaps", "", "team", "cm"), Meta{AuditID: "x", Received: time.Now()})
		r.SetRequestObject([]byte(`{"metadata":{"name":"cm","uid":"u","resourceVersion":"3"}}`), "application/json")
		r.ResponseHeader(200, "application/json")
		r.ResponseBody([]byte(`{"metadata":{"name":"cm"}}`))
		r.Complete(200)
		evs := sink.events(t)
		if c.level == auditv1.LevelNone {
			if r != nil || len(evs) != 0 {
				t.Errorf("None: %v, %d events", r, len(evs))
			}
			continue
		}
		ev := evs[len(evs)-1]
		if ev.Level != c.level || (ev.RequestObject != nil) != c.request || (ev.ResponseObject != nil) != c.resp {
			t.Errorf("%s: level %s, request object %v, response object %v", c.level, ev.Level, ev.RequestObject, ev.ResponseObject)
		}
		if ev.ObjectRef.UID != "u" || ev.ObjectRef.ResourceVersion != "3" {
			t.Errorf("%s: the object reference lacks the body's uid and resourceVersion: %+v", c.level, ev.ObjectRef)
		}
	}
}

// TestSensitiveObjectsNeverRecorded: whatever the level, requests for
// Secrets (a get, a list, a watch, a create), TokenRequests and
// TokenReviews are audited at Metadata, without their objects.
func TestSensitiveObjectsNeverRecorded(t *testing.T) {
	a, sink := newTestAuditor(t, everythingAtRequestResponse)
	const secret = `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"password":"aHVudGVyMg=="}}`
	for _, attrs := range []*Attributes{
		resourceAttrs("alice", nil, "create", "", "secrets", "", "team", ""),
		resourceAttrs("alice", nil, "get", "", "secrets", "", "team", "s"),
		resourceAttrs("alice", nil, "list", "", "secrets", "", "", ""),
		resourceAttrs("alice", nil, "watch", "", "secrets", "", "team", ""),
		resourceAttrs("alice", nil, "create", "", "serviceaccounts", "token", "team", "sa"),
		resourceAttrs("alice", nil, "create", "authentication.k8s.io", "tokenreviews", "", "", ""),
	} {
		r := a.Begin(attrs, Meta{AuditID: attrs.Verb, Received: time.Now(), LongRunning: attrs.Verb == "watch"})
		r.SetRequestObject([]byte(secret), "application/json")
		r.ResponseHeader(200, "application/json")
		r.ResponseBody([]byte(secret))
		r.Complete(200)
	}
	for _, ev := range sink.events(t) {
		if ev.Level != auditv1.LevelMetadata || ev.RequestObject != nil || ev.ResponseObject != nil {
			t.Errorf("%s %s: level %s with objects", ev.Verb, ev.ObjectRef.Resource, ev.Level)
		}
	}
	for _, l := range sink.lines {
		if strings.Contains(l, "aHVudGVyMg==") {
			t.Errorf("a secret's data was written: %s", l)
		}
	}
	// A config map's is.
	r := a.Begin(resourceAttrs("alice", nil, "get", "", "configmaps", "", "team", "c"), Meta{Received: time.Now()})
	if r.Level() != auditv1.LevelRequestResponse {
		t.Errorf("a config map's level: %s", r.Level())
	}
}

// TestStages: a watch has ResponseStarted and no response object;
// omitted stages are not written; a panic is its own stage.
func TestStages(t *testing.T) {
	a, sink := newTestAuditor(t, everythingAtRequestResponse)
	r := a.Begin(resourceAttrs("alice", nil, "watch", "", "configmaps", "", "team", ""), Meta{AuditID: "w", Received: time.Now(), LongRunning: true})
	r.ResponseHeader(200, "application/json")
	r.ResponseBody([]byte(`{"type":"ADDED","object":{}}`))
	r.Complete(200)
	evs := sink.events(t)
	if stagesOf(evs) != "RequestReceived,ResponseStarted,ResponseComplete" || evs[2].ResponseObject != nil || evs[1].ResponseStatus.Code != 200 {
		t.Errorf("watch: stages %s, %+v", stagesOf(evs), evs[len(evs)-1])
	}

	a, sink = newTestAuditor(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  omitStages: [ResponseStarted]\n")
	r = a.Begin(resourceAttrs("alice", nil, "watch", "", "configmaps", "", "team", ""), Meta{Received: time.Now(), LongRunning: true})
	r.ResponseHeader(200, "application/json")
	r.Complete(200)
	if got := stagesOf(sink.events(t)); got != "ResponseComplete" {
		t.Errorf("omitted stages: %s", got)
	}

	a, sink = newTestAuditor(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
	r = a.Begin(nonResource("alice", "get", "/version"), Meta{Received: time.Now()})
	r.Panic("boom")
	r.Complete(500)
	evs = sink.events(t)
	if stagesOf(evs) != "RequestReceived,Panic" || evs[1].ResponseStatus.Code != 500 || evs[1].ResponseStatus.Message != "boom" || evs[1].ObjectRef != nil {
		t.Errorf("panic: %s %+v", stagesOf(evs), evs[len(evs)-1])
	}
}

// TestErrorStatus: a failed request's responseStatus carries its Status's
// reason and message, at Metadata too.
func TestErrorStatus(t *testing.T) {
	a, sink := newTestAuditor(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
	r := a.Begin(resourceAttrs("alice", nil, "get", "", "configmaps", "", "team", "nope"), Meta{Received: time.Now()})
	AnnotateDecision(r, false, "no binding")
	r.ResponseHeader(404, "application/json")
	r.ResponseBody([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"nope\" not found","reason":"NotFound","code":404}`))
	r.Complete(404)
	ev := sink.events(t)[1]
	if st := ev.ResponseStatus; st.Code != 404 || st.Reason != "NotFound" || st.Message != `configmaps "nope" not found` || st.Status != "Failure" || ev.ResponseObject != nil {
		t.Errorf("status %+v, response object %v", st, ev.ResponseObject)
	}
	if ev.Annotations[DecisionAnnotation] != "forbid" || ev.Annotations[ReasonAnnotation] != "no binding" {
		t.Errorf("annotations %v", ev.Annotations)
	}
}

// TestOmitManagedFields strips metadata.managedFields from objects and
// list items.
func TestOmitManagedFields(t *testing.T) {
	a, sink := newTestAuditor(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitManagedFields: true\nrules:\n- level: RequestResponse\n")
	r := a.Begin(resourceAttrs("alice", nil, "list", "", "configmaps", "", "team", ""), Meta{Received: time.Now()})
	r.SetRequestObject([]byte(`{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}]}}`), "application/json")
	r.ResponseHeader(200, "application/json")
	r.ResponseBody([]byte(`{"kind":"ConfigMapList","items":[{"metadata":{"name":"a","managedFields":[{"manager":"kubectl"}]}}]}`))
	r.Complete(200)
	ev := sink.events(t)[1]
	if strings.Contains(string(ev.RequestObject.Raw), "managedFields") || strings.Contains(string(ev.ResponseObject.Raw), "managedFields") ||
		!strings.Contains(string(ev.ResponseObject.Raw), `"name":"a"`) {
		t.Errorf("objects: %s / %s", ev.RequestObject.Raw, ev.ResponseObject.Raw)
	}
}

// TestNoAuditor: a nil auditor and a nil request accept every call.
func TestNoAuditor(t *testing.T) {
	var a *Auditor
	r := a.Begin(resourceAttrs("alice", nil, "get", "", "pods", "", "", ""), Meta{})
	if r != nil {
		t.Fatal("a nil auditor began an event")
	}
	r.AddAnnotation("k", "v")
	r.SetRequestObject([]byte("{}"), "application/json")
	r.ResponseHeader(200, "")
	r.ResponseBody([]byte("{}"))
	r.Complete(200)
	r.Panic("x")
	AnnotateDecision(r, true, "")
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}
