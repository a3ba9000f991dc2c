package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

// Annotation keys of the authorization decision, as kube-apiserver's.
const (
	DecisionAnnotation = "authorization.k8s.io/decision"
	ReasonAnnotation   = "authorization.k8s.io/reason"
)

// maxResponseBody bounds the response body a RequestResponse event
// records; a larger response is audited without its object.
const maxResponseBody = 16 << 20

// maxStatusBody bounds the error body read for the responseStatus of a
// failed request (a Status is far smaller).
const maxStatusBody = 64 << 10

// Meta is what the front end knows of a request when it begins.
type Meta struct {
	// AuditID is the request's Audit-Id.
	AuditID string
	// RequestURI is the URI the client sent (for gRPC, the method).
	RequestURI string
	UserAgent  string
	SourceIPs  []string
	// Received is when the request arrived.
	Received time.Time
	// LongRunning marks a watch: its event has a ResponseStarted stage,
	// sent when the response's header is, and never a response object.
	LongRunning bool
}

// Request is the audit event of one request, filled in as the request is
// served and written at each stage the policy keeps. A nil *Request (the
// request is not audited) accepts every call and does nothing. It is safe
// for concurrent use.
type Request struct {
	a           *Auditor
	d           Decision
	longRunning bool

	mu      sync.Mutex
	ev      auditv1.Event
	code    int
	started bool
	// capture: the response body is kept in body (for the response
	// object, or for the Status of an error), of media type bodyType.
	capture  bool
	body     []byte
	bodyType string
	// done: the last stage (Complete or Panic) was written.
	done bool
}

// Level is the level the request is audited at; None for nil.
func (r *Request) Level() auditv1.Level {
	if r == nil {
		return auditv1.LevelNone
	}
	return r.d.Level
}

// begin starts the event of a request the policy audits at d.Level and
// writes its RequestReceived stage.
func (a *Auditor) begin(attrs *Attributes, d Decision, m Meta) *Request {
	r := &Request{a: a, d: d, longRunning: m.LongRunning}
	r.ev = auditv1.Event{
		TypeMeta:                 metav1.TypeMeta{Kind: "Event", APIVersion: auditv1.SchemeGroupVersion.String()},
		Level:                    d.Level,
		AuditID:                  types.UID(m.AuditID),
		RequestURI:               m.RequestURI,
		Verb:                     attrs.Verb,
		User:                     userInfo(attrs.User),
		SourceIPs:                m.SourceIPs,
		UserAgent:                m.UserAgent,
		RequestReceivedTimestamp: metav1.NewMicroTime(m.Received),
	}
	if attrs.ResourceRequest {
		r.ev.ObjectRef = &auditv1.ObjectReference{
			Resource: attrs.Resource, Namespace: attrs.Namespace, Name: attrs.Name,
			APIGroup: attrs.APIGroup, APIVersion: attrs.APIVersion, Subresource: attrs.Subresource,
		}
	}
	r.mu.Lock()
	r.emit(auditv1.StageRequestReceived, m.Received)
	r.mu.Unlock()
	return r
}

func userInfo(u identity.User) authnv1.UserInfo {
	out := authnv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		out.Extra = make(map[string]authnv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			out.Extra[k] = v
		}
	}
	return out
}

// SetImpersonatedUser records the user an impersonating request acts as.
func (r *Request) SetImpersonatedUser(u identity.User) {
	if r == nil {
		return
	}
	ui := userInfo(u)
	r.mu.Lock()
	r.ev.ImpersonatedUser = &ui
	r.mu.Unlock()
}

// AddAnnotation sets an annotation of the event; the first value of a key
// stays.
func (r *Request) AddAnnotation(key, value string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.ev.Annotations == nil {
		r.ev.Annotations = map[string]string{}
	}
	if _, ok := r.ev.Annotations[key]; !ok {
		r.ev.Annotations[key] = value
	}
	r.mu.Unlock()
}

// SetRequestObject records the request's body, of media type
// contentType. At Metadata and above the object reference takes the
// name, namespace, uid and resourceVersion of a created or updated
// object; at Request and above the body becomes the requestObject. JSON
// bodies are recorded as they are, YAML and protobuf ones converted to
// JSON. data must not be changed afterwards.
func (r *Request) SetRequestObject(data []byte, contentType string) {
	if r == nil || len(data) == 0 {
		return
	}
	js := r.a.toJSON(data, contentType)
	if js == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ref := r.ev.ObjectRef; ref != nil && (r.ev.Verb == "create" || r.ev.Verb == "update") {
		var obj struct {
			Metadata struct {
				Name, Namespace, UID, ResourceVersion string
			} `json:"metadata"`
		}
		if json.Unmarshal(js, &obj) == nil {
			m := obj.Metadata
			fill(&ref.Name, m.Name)
			fill(&ref.Namespace, m.Namespace)
			fill((*string)(&ref.UID), m.UID)
			fill(&ref.ResourceVersion, m.ResourceVersion)
		}
	}
	if rank(r.d.Level) >= rank(auditv1.LevelRequest) {
		if r.d.OmitManagedFields {
			js = withoutManagedFields(js)
		}
		r.ev.RequestObject = &runtime.Unknown{Raw: js, ContentType: runtime.ContentTypeJSON}
	}
}

func fill(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

// toJSON returns a JSON, YAML or (with a Converter) protobuf body as
// JSON; nil for another media type or a body that does not decode.
func (a *Auditor) toJSON(data []byte, contentType string) []byte {
	mt, _, _ := strings.Cut(contentType, ";")
	switch mt = strings.TrimSpace(mt); {
	case mt == "" || strings.HasSuffix(mt, "json"):
		if json.Valid(data) {
			return data
		}
	case strings.HasSuffix(mt, "yaml"):
		if js, err := yaml.YAMLToJSON(data); err == nil {
			return js
		}
	case strings.HasSuffix(mt, "protobuf") && a.convert != nil:
		if js, err := a.convert(data); err == nil {
			return js
		}
	}
	return nil
}

// recordable reports whether a body of media type contentType can be
// recorded (toJSON).
func (a *Auditor) recordable(contentType string) bool {
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.TrimSpace(mt)
	return strings.HasSuffix(mt, "json") || (strings.HasSuffix(mt, "protobuf") && a.convert != nil)
}

// ResponseHeader notes the response's status code and media type when
// its header is written, and writes the ResponseStarted stage of a watch.
func (r *Request) ResponseHeader(code int, contentType string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return
	}
	r.started, r.code, r.bodyType = true, code, contentType
	r.capture = r.a.recordable(contentType) && ((!r.longRunning && r.d.Level == auditv1.LevelRequestResponse) || code >= 400)
	if r.longRunning {
		r.ev.ResponseStatus = &metav1.Status{Code: int32(code)}
		r.emit(auditv1.StageResponseStarted, time.Now())
	}
}

// ResponseBody records bytes of the response body, when the event needs
// them.
func (r *Request) ResponseBody(b []byte) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.capture {
		return
	}
	limit := maxResponseBody
	if r.code >= 400 && r.d.Level != auditv1.LevelRequestResponse {
		limit = maxStatusBody
	}
	if len(r.body)+len(b) > limit {
		r.capture, r.body = false, nil
		return
	}
	r.body = append(r.body, b...)
}

// Complete writes the ResponseComplete stage: the response's status
// (code; for an error, its Status's status, reason and message) and, at
// RequestResponse, the response object. code is the status the response
// was sent with.
func (r *Request) Complete(code int) {
	r.finish(func() {
		st := &metav1.Status{Code: int32(code)}
		var body []byte
		if r.body != nil {
			body = r.a.toJSON(r.body, r.bodyType)
		}
		if code >= 400 && body != nil {
			var s metav1.Status
			if json.Unmarshal(body, &s) == nil && s.Kind == "Status" {
				st = &metav1.Status{Status: s.Status, Message: s.Message, Reason: s.Reason, Details: s.Details, Code: int32(code)}
			}
		}
		r.ev.ResponseStatus = st
		if r.d.Level == auditv1.LevelRequestResponse && !r.longRunning && body != nil {
			if r.d.OmitManagedFields {
				body = withoutManagedFields(body)
			}
			r.ev.ResponseObject = &runtime.Unknown{Raw: body, ContentType: runtime.ContentTypeJSON}
		}
		r.emit(auditv1.StageResponseComplete, time.Now())
		r.body = nil
	})
}

// Panic writes the Panic stage of a request whose handler panicked: a 500
// with the panic's message.
func (r *Request) Panic(message string) {
	r.finish(func() {
		r.ev.ResponseStatus = &metav1.Status{Status: metav1.StatusFailure, Code: 500, Reason: metav1.StatusReasonInternalError, Message: message}
		r.ev.ResponseObject = nil
		r.emit(auditv1.StagePanic, time.Now())
	})
}

// finish runs write, which writes the request's last stage, with r.mu
// held: once per request (Complete or Panic, whichever comes first), and
// not at all for a nil r.
func (r *Request) finish(write func()) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	write()
}

// emit writes the event at stage s, unless the policy omits s. r.mu is
// held.
func (r *Request) emit(s auditv1.Stage, t time.Time) {
	if r.d.Omits(s) {
		return
	}
	r.ev.Stage = s
	r.ev.StageTimestamp = metav1.NewMicroTime(t)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&r.ev); err != nil {
		r.a.failed("encode", 1, err)
		return
	}
	// Encode ends the line with '\n': one event per line.
	r.a.write(buf.Bytes())
}

// withoutManagedFields removes metadata.managedFields from an object, and
// from each of a list's items; data that is not an object is returned as
// it is.
func withoutManagedFields(data []byte) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(data, &obj) != nil {
		return data
	}
	changed := false
	if md, ok := obj["metadata"]; ok {
		if out, ok := dropKey(md, "managedFields"); ok {
			obj["metadata"], changed = out, true
		}
	}
	if raw, ok := obj["items"]; ok {
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			for i, it := range items {
				var o map[string]json.RawMessage
				if json.Unmarshal(it, &o) != nil {
					continue
				}
				if md, ok := o["metadata"]; ok {
					if out, ok := dropKey(md, "managedFields"); ok {
						o["metadata"] = out
						if b, err := json.Marshal(o); err == nil {
							items[i], changed = b, true
						}
					}
				}
			}
			if b, err := json.Marshal(items); err == nil {
				obj["items"] = b
			}
		}
	}
	if !changed {
		return data
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return data
	}
	return out
}

// dropKey returns the JSON object data without key, and whether it had it.
func dropKey(data json.RawMessage, key string) (json.RawMessage, bool) {
	var o map[string]json.RawMessage
	if json.Unmarshal(data, &o) != nil {
		return data, false
	}
	if _, ok := o[key]; !ok {
		return data, false
	}
	delete(o, key)
	out, err := json.Marshal(o)
	if err != nil {
		return data, false
	}
	return out, true
}

// CompleteStatus writes the ResponseComplete stage of a request that
// failed with st and has no response body of its own (a gRPC call's
// error): st is its responseStatus, and its response object at
// RequestResponse.
func (r *Request) CompleteStatus(st metav1.Status) {
	if r == nil {
		return
	}
	st.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if st.Status == "" {
		st.Status = metav1.StatusFailure
	}
	data, err := json.Marshal(&st)
	if err != nil {
		data = nil
	}
	r.ResponseHeader(int(st.Code), runtime.ContentTypeJSON)
	r.ResponseBody(data)
	r.Complete(int(st.Code))
}

// Verb is the request's verb; "" for nil.
func (r *Request) Verb() string {
	if r == nil {
		return ""
	}
	return r.ev.Verb
}
