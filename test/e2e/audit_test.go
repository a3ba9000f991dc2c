package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// auditPolicy logs config maps and secrets at RequestResponse and
// everything else at Metadata, without the RequestReceived stage.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps", "secrets"]
- level: Metadata
`

// auditWebhook is an HTTPS audit webhook: it keeps the events of the
// EventLists POSTed to it.
type auditWebhook struct {
	srv    *httptest.Server
	mu     sync.Mutex
	events []auditv1.Event
	posts  int
}

func newAuditWebhook(t *testing.T) *auditWebhook {
	w := &auditWebhook{}
	w.srv = httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var list auditv1.EventList
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&list) != nil ||
			list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" {
			http.Error(rw, "want a POSTed audit.k8s.io/v1 EventList", http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.events = append(w.events, list.Items...)
		w.posts++
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// kubeconfig writes the webhook's kubeconfig: its URL and CA.
func (w *auditWebhook) kubeconfig(t *testing.T) string {
	t.Helper()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.srv.Certificate().Raw})
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["audit"] = &clientcmdapi.Cluster{Server: w.srv.URL + "/audit", CertificateAuthorityData: caPEM}
	cfg.AuthInfos["gateway"] = &clientcmdapi.AuthInfo{Token: "webhook-token"}
	cfg.Contexts["audit"] = &clientcmdapi.Context{Cluster: "audit", AuthInfo: "gateway"}
	cfg.CurrentContext = "audit"
	p := filepath.Join(t.TempDir(), "audit-webhook.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (w *auditWebhook) received() []auditv1.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]auditv1.Event(nil), w.events...)
}

// readAuditLog returns the events of a JSON-lines audit log; every line
// must be one Event.
func readAuditLog(t *testing.T, path string) []auditv1.Event {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var events []auditv1.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Kind != "Event" || ev.APIVersion != "audit.k8s.io/v1" {
			t.Fatalf("audit log line is not an audit.k8s.io/v1 Event (%v): %s", err, sc.Text())
		}
		events = append(events, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// waitEvent polls events() until one matches, for at most 10s (events are
// written once the response has gone).
func waitEvent(t *testing.T, what string, events func() []auditv1.Event, match func(*auditv1.Event) bool) auditv1.Event {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		evs := events()
		for i := range evs {
			if match(&evs[i]) {
				return evs[i]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit event for %s among %d", what, len(evs))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// auditIDPattern finds the response headers' Audit-Id in kubectl -v=8's
// output.
var auditIDPattern = regexp.MustCompile(`Audit-Id: ([0-9a-f-]{36})`)

// TestKubectlAudit audits a control plane with a policy logging config
// maps and secrets at RequestResponse and everything else at Metadata, to
// a log file and to an HTTPS webhook. kubectl create configmap is logged
// (ResponseComplete, verb create, the admin, the object's reference, its
// data in both the request and the response objects) under the Audit-Id
// kubectl received; a Secret's data is in neither the log nor the
// webhook's events though its rule says RequestResponse; a 403 is logged
// with its decision; the webhook receives the same events.
func TestKubectlAudit(t *testing.T) {
	requireKubectl(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit", "audit.log")
	hook := newAuditWebhook(t)
	cp := start(t, "", "--audit-policy-file", policy, "--audit-log-path", logPath, "--audit-log-maxsize", "100",
		"--audit-webhook-config-file", hook.kubeconfig(t), "--audit-webhook-batch-max-wait", "100ms")
	logEvents := func() []auditv1.Event { return readAuditLog(t, logPath) }

	// A config map, at RequestResponse.
	_, verbose, err := cp.kubectlErr("create", "configmap", "audited", "--from-literal=color=blue", "-v=8")
	if err != nil {
		t.Fatalf("kubectl create configmap: %v\n%s", err, verbose)
	}
	post := strings.Index(verbose, "POST https://"+cp.addr+"/api/v1/namespaces/default/configmaps")
	if post < 0 {
		t.Fatalf("kubectl -v=8 shows no POST of the config map:\n%s", verbose)
	}
	m := auditIDPattern.FindStringSubmatch(verbose[post:])
	if m == nil {
		t.Fatalf("the create's response has no Audit-Id header:\n%s", verbose[post:])
	}
	auditID := m[1]
	created := waitEvent(t, "the config map's create", logEvents, func(ev *auditv1.Event) bool {
		return string(ev.AuditID) == auditID && ev.Stage == auditv1.StageResponseComplete
	})
	ref := created.ObjectRef
	if created.Verb != "create" || created.Level != auditv1.LevelRequestResponse || created.User.Username != "admin" ||
		ref == nil || ref.Resource != "configmaps" || ref.Namespace != "default" || ref.Name != "audited" || ref.APIVersion != "v1" ||
		created.ResponseStatus == nil || created.ResponseStatus.Code != http.StatusCreated ||
		created.Annotations["authorization.k8s.io/decision"] != "allow" || created.RequestURI != "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create&fieldValidation=Strict" ||
		!strings.HasPrefix(created.UserAgent, "kubectl") || len(created.SourceIPs) == 0 {
		t.Errorf("the create's event: %+v (objectRef %+v, responseStatus %+v)", created, ref, created.ResponseStatus)
	}
	for name, obj := range map[string][]byte{"requestObject": rawOf(created.RequestObject), "responseObject": rawOf(created.ResponseObject)} {
		var cm struct {
			Metadata struct{ Name, UID string }
			Data     map[string]string
		}
		if err := json.Unmarshal(obj, &cm); err != nil || cm.Metadata.Name != "audited" || cm.Data["color"] != "blue" {
			t.Errorf("%s: %v %s, want the config map with color=blue", name, err, obj)
		}
	}
	for _, ev := range logEvents() {
		if string(ev.AuditID) == auditID && ev.Stage == auditv1.StageRequestReceived {
			t.Errorf("the policy omits RequestReceived, the log has it: %+v", ev)
		}
	}

	// A secret: its rule says RequestResponse; its data is never written.
	const value = "s3cr3t-value-8d1e5"
	cp.kubectl("create", "secret", "generic", "topsecret", "--from-literal=password="+value)
	cp.kubectl("get", "secret", "topsecret", "-o", "yaml")
	cp.kubectl("get", "secrets")
	secretEvent := waitEvent(t, "the secret's create", logEvents, func(ev *auditv1.Event) bool {
		return ev.Verb == "create" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" && ev.ObjectRef.Name == "topsecret" && ev.Stage == auditv1.StageResponseComplete
	})
	if secretEvent.Level != auditv1.LevelMetadata || secretEvent.RequestObject != nil || secretEvent.ResponseObject != nil {
		t.Errorf("the secret's create is audited at %s with objects %v %v; want Metadata without objects", secretEvent.Level, secretEvent.RequestObject, secretEvent.ResponseObject)
	}
	waitEvent(t, "the secrets' list", logEvents, func(ev *auditv1.Event) bool {
		return ev.Verb == "list" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "secrets" && ev.Stage == auditv1.StageResponseComplete
	})

	// A 403: carol may read nothing.
	carol := cp.tokenKubeconfig("e2e-token-carol")
	if _, _, err := kubectlWith(carol, "get", "configmaps", "-n", "default"); err == nil {
		t.Fatal("carol listed config maps")
	}
	forbidden := waitEvent(t, "carol's 403", logEvents, func(ev *auditv1.Event) bool {
		return ev.User.Username == "carol" && ev.Verb == "list" && ev.Stage == auditv1.StageResponseComplete
	})
	if st := forbidden.ResponseStatus; st == nil || st.Code != http.StatusForbidden || st.Reason != "Forbidden" ||
		!strings.Contains(st.Message, `User "carol" cannot list resource "configmaps"`) ||
		forbidden.Annotations["authorization.k8s.io/decision"] != "forbid" {
		t.Errorf("carol's 403 event: status %+v, annotations %v", forbidden.ResponseStatus, forbidden.Annotations)
	}

	// The webhook gets the same events.
	hooked := waitEvent(t, "the create, at the webhook", hook.received, func(ev *auditv1.Event) bool {
		return string(ev.AuditID) == auditID && ev.Stage == auditv1.StageResponseComplete
	})
	if string(rawOf(hooked.RequestObject)) != string(rawOf(created.RequestObject)) || hooked.User.Username != "admin" || hooked.Verb != "create" {
		t.Errorf("the webhook's event differs from the log's: %+v", hooked)
	}
	waitEvent(t, "carol's 403, at the webhook", hook.received, func(ev *auditv1.Event) bool {
		return string(ev.AuditID) == string(forbidden.AuditID) && ev.Stage == auditv1.StageResponseComplete
	})

	// Nowhere is the secret's value, plain or base64.
	logData, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	hookData, err := json.Marshal(hook.received())
	if err != nil {
		t.Fatal(err)
	}
	for _, needle := range []string{value, base64.StdEncoding.EncodeToString([]byte(value))} {
		if strings.Contains(string(logData), needle) || strings.Contains(string(hookData), needle) {
			t.Errorf("the secret's value %q is in the audit log or the webhook's events", needle)
		}
	}
	if info, err := os.Stat(logPath); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("audit log: %v, mode %v; want 0600", err, info.Mode())
	}
}

// rawOf is the JSON of a request or response object; nil when absent.
func rawOf(u *runtime.Unknown) []byte {
	if u == nil {
		return nil
	}
	return u.Raw
}

// TestAuditIDOnEveryResponse checks the Audit-Id header on a 200, a 401,
// a 403, a 404 and a watch, without an audit policy: a new UUID, or the
// client's own Audit-Id.
func TestAuditIDOnEveryResponse(t *testing.T) {
	cp := start(t, "")
	client := cp.anonymousHTTP()
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	get := func(path, token string, header map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, cp.url(path), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, c := range []struct {
		name, path, token string
		code              int
	}{
		{"version", "/version", "", http.StatusOK},
		{"bad token", "/api/v1/namespaces", "no-such-token", http.StatusUnauthorized},
		{"forbidden", "/api/v1/namespaces/default/configmaps", "e2e-token-carol", http.StatusForbidden},
	} {
		resp := get(c.path, c.token, nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || !uuid.MatchString(resp.Header.Get("Audit-Id")) {
			t.Errorf("%s: %d, Audit-Id %q; want %d and a UUID", c.name, resp.StatusCode, resp.Header.Get("Audit-Id"), c.code)
		}
	}
	resp := get("/version", "", map[string]string{"Audit-Id": "my-own-audit-id"})
	resp.Body.Close()
	if got := resp.Header.Get("Audit-Id"); got != "my-own-audit-id" {
		t.Errorf("a request's own Audit-Id: the response's is %q", got)
	}

	// A 404, and a watch, whose header comes with the stream's start.
	cp.grant("default", "carol-reads", "carol", "get,watch,list", "configmaps")
	resp = get("/api/v1/namespaces/default/configmaps/nosuchmap", "e2e-token-carol", nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !uuid.MatchString(resp.Header.Get("Audit-Id")) {
		t.Errorf("not found: %d, Audit-Id %q", resp.StatusCode, resp.Header.Get("Audit-Id"))
	}
	resp = get("/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1", "e2e-token-carol", nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !uuid.MatchString(resp.Header.Get("Audit-Id")) {
		t.Errorf("watch: %d, Audit-Id %q", resp.StatusCode, resp.Header.Get("Audit-Id"))
	}
}
