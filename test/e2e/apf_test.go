package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// aliceToReject routes alice to a priority level of one seat that
// rejects rather than queues (1 nominal share of a 100-seat server limit,
// and nothing to borrow).
const aliceToReject = `apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: e2e-one-seat
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    borrowingLimitPercent: 0
    limitResponse:
      type: Reject
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: e2e-alice
spec:
  matchingPrecedence: 100
  priorityLevelConfiguration:
    name: e2e-one-seat
  distinguisherMethod:
    type: ByUser
  rules:
  - subjects:
    - kind: User
      user:
        name: alice
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      namespaces: ["*"]
`

// TestFlowControlObjects: kubectl lists the mandatory and suggested
// FlowSchemas and PriorityLevelConfigurations, a FlowSchema naming a
// missing level is Dangling (MissingPL True), and a mandatory one cannot
// be changed.
func TestFlowControlObjects(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	// The flow-control service creates the configuration once it has
	// started, beside the API: wait for every object, as a client
	// listing them right after start would see them appear.
	containsAll := func(wants ...string) func(string) bool {
		return func(out string) bool {
			for _, want := range wants {
				if !strings.Contains(out, want) {
					return false
				}
			}
			return true
		}
	}
	waitKubectl(t, cp, "the mandatory and suggested FlowSchemas", containsAll("PRIORITYLEVEL", "MATCHINGPRECEDENCE", "MISSINGPL", "exempt", "probes", "system-leader-election",
		"system-node-high", "system-nodes", "kube-controller-manager", "kube-scheduler", "kube-system-service-accounts",
		"service-accounts", "global-default", "catch-all"), "get", "flowschemas")
	waitKubectl(t, cp, "the mandatory and suggested PriorityLevelConfigurations", containsAll("NOMINALCONCURRENCYSHARES", "exempt", "catch-all", "leader-election", "node-high", "system",
		"workload-high", "workload-low", "global-default"), "get", "prioritylevelconfigurations")
	if got := cp.kubectl("get", "prioritylevelconfiguration", "workload-low", "-o", "jsonpath={.spec.limited.nominalConcurrencyShares}/{.spec.limited.lendablePercent}"); got != "100/90" {
		t.Errorf("workload-low shares/lendable %q, want 100/90", got)
	}

	cp.kubectl("apply", "-f", manifest(t, "dangling.yaml", `apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: e2e-dangling
spec:
  priorityLevelConfiguration:
    name: e2e-missing
  rules:
  - subjects:
    - kind: Group
      group:
        name: e2e
    nonResourceRules:
    - verbs: ["get"]
      nonResourceURLs: ["/e2e/*"]
`))
	waitKubectl(t, cp, "e2e-dangling to be Dangling", func(out string) bool { return out == "True/NotFound/1000" },
		"get", "flowschema", "e2e-dangling", "-o", `jsonpath={.status.conditions[?(@.type=="Dangling")].status}/{.status.conditions[?(@.type=="Dangling")].reason}/{.spec.matchingPrecedence}`)

	_, errOut, err := cp.kubectlErr("patch", "flowschema", "catch-all", "--type=merge", "-p", `{"spec":{"matchingPrecedence":5000}}`)
	if err == nil || !strings.Contains(errOut, "spec of 'catch-all' must equal the fixed value") {
		t.Errorf("patching catch-all: %v %s", err, errOut)
	}
	cp.kubectl("delete", "flowschema", "exempt")
	// The maintenance of a gateway that starts again restores it at once.
	cp.stop()
	cp = start(t, cp.dataDir)
	if got := cp.kubectl("get", "flowschema", "exempt", "-o", "jsonpath={.spec.matchingPrecedence}"); got != "1" {
		t.Errorf("exempt after a restart: %q", got)
	}
}

// waitKubectl runs kubectl until its output satisfies ok, for at most 15s.
func waitKubectl(t *testing.T, cp *controlPlane, what string, ok func(string) bool, args ...string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, _ := cp.kubectlErr(args...)
		if ok(out) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: kubectl %s still says %q", what, strings.Join(args, " "), out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdSeat starts a create as the token's user and sends its headers but
// not its body: the request holds its seat (taken before the body is
// read) until the returned func closes the connection. A create answered
// at once (a 429 while the seat of the user's previous request is still
// being released: gateways release in batches) is tried again.
func holdSeat(t *testing.T, cp *controlPlane, token string) func() {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		conn, err := tls.Dial("tcp", cp.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Fprintf(conn, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n", cp.addr, token); err != nil {
			t.Fatal(err)
		}
		// No answer within half a second: it waits for its body, seated.
		_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var b [1]byte
		if _, err := conn.Read(b[:]); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				var once sync.Once
				closeIt := func() { once.Do(func() { conn.Close() }) }
				t.Cleanup(closeIt)
				return closeIt
			}
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("the create never held a seat")
		}
	}
}

// TestFlowControlRejects: a FlowSchema routes alice (a token user) to a
// Reject level of one seat. While one of her requests holds it, her next
// is a 429 Status with Retry-After (and the X-Kubernetes-PF-* headers of
// her FlowSchema and level), and kubectl as alice fails with
// TooManyRequests; system:masters is never throttled. Once the seat is
// free, alice's requests run again, classified by her FlowSchema.
func TestFlowControlRejects(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "", "--flowcontrol-concurrency-limit", "100")
	cp.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", "default")
	cp.kubectl("apply", "-f", manifest(t, "alice.yaml", aliceToReject))
	uid := cp.kubectl("get", "flowschema", "e2e-alice", "-o", "jsonpath={.metadata.uid}")
	exemptUID := cp.kubectl("get", "flowschema", "exempt", "-o", "jsonpath={.metadata.uid}")
	anonymous := cp.anonymousHTTP()
	admin, err := rest.HTTPClientFor(cp.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	// get lists configmaps as the token's user, or as the admin when
	// token is empty.
	get := func(token string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, cp.url("/api/v1/namespaces/default/configmaps"), nil)
		if err != nil {
			t.Fatal(err)
		}
		c := admin
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
			c = anonymous
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	// The service applies the FlowSchema within a second or so: alice's
	// requests carry its UID.
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, _ := get("e2e-token-alice")
		if resp.StatusCode == 200 && resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == uid {
			if resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID") != cp.kubectl("get", "prioritylevelconfiguration", "e2e-one-seat", "-o", "jsonpath={.metadata.uid}") {
				t.Errorf("priority level UID %q", resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID"))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's requests are not classified by e2e-alice: %d %v", resp.StatusCode, resp.Header)
		}
		time.Sleep(100 * time.Millisecond)
	}

	release := holdSeat(t, cp, "e2e-token-alice")
	deadline = time.Now().Add(15 * time.Second)
	var resp *http.Response
	var body []byte
	for {
		if resp, body = get("e2e-token-alice"); resp.StatusCode == http.StatusTooManyRequests || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || resp.StatusCode != 429 || st.Kind != "Status" || st.Code != 429 ||
		st.Reason != metav1.StatusReasonTooManyRequests || resp.Header.Get("Retry-After") != "1" ||
		resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != uid {
		t.Fatalf("alice with her seat taken: %d %v %s", resp.StatusCode, resp.Header, body)
	}

	// system:masters: exempt, never throttled, however many at once.
	var wg sync.WaitGroup
	errs := make(chan string, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, errOut, err := cp.kubectlErr("get", "configmaps", "-n", "default"); err != nil {
				errs <- fmt.Sprintf("%v %s %s", err, out, errOut)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("admin throttled: %s", e)
	}
	if resp, body := get(""); resp.StatusCode != 200 || resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID") != exemptUID {
		t.Errorf("admin: %d %v %s, want 200 from flow schema exempt", resp.StatusCode, resp.Header, body)
	}
	out := cp.kubectl("get", "--raw", "/metrics")
	if !strings.Contains(out, `apiserver_flowcontrol_rejected_requests_total{flow_schema="e2e-alice",priority_level="e2e-one-seat",reason="concurrency-limit"`) {
		t.Errorf("no rejection counted in /metrics")
	}
	if !strings.Contains(out, `apiserver_flowcontrol_nominal_limit_seats{priority_level="e2e-one-seat"`) {
		t.Errorf("no nominal limit of e2e-one-seat in /metrics")
	}

	// The debug endpoints show the held request and the rejection.
	levels := cp.kubectl("get", "--raw", "/debug/api_priority_and_fairness/dump_priority_levels")
	if !strings.HasPrefix(levels, "PriorityLevelName, ActiveQueues, IsIdle,") || !rowMatches(levels, "e2e-one-seat", 5, "1") || rowMatches(levels, "e2e-one-seat", 7, "0") {
		t.Errorf("dump_priority_levels (want e2e-one-seat executing 1, rejected > 0):\n%s", levels)
	}
	requests := cp.kubectl("get", "--raw", "/debug/api_priority_and_fairness/dump_requests?includeRequestDetails=1")
	if !strings.Contains(requests, "UserName") || !rowMatches(requests, "e2e-one-seat", 1, "e2e-alice") || !rowMatches(requests, "e2e-one-seat", 10, "alice") ||
		!rowMatches(requests, "e2e-one-seat", 11, "create") {
		t.Errorf("dump_requests (want alice's create at e2e-one-seat):\n%s", requests)
	}
	if queues := cp.kubectl("get", "--raw", "/debug/api_priority_and_fairness/dump_queues"); !rowMatches(queues, "global-default", 1, "127") {
		t.Errorf("dump_queues (want global-default's 128 queues):\n%s", queues)
	}

	// kubectl as alice: client-go retries after Retry-After, then gives up.
	aliceConfig := cp.tokenKubeconfig("e2e-token-alice")
	_, errOut, err := kubectlWith(aliceConfig, "get", "configmaps", "-n", "default")
	if err == nil || !strings.Contains(errOut, "TooManyRequests") {
		t.Fatalf("kubectl as alice with her seat taken: %v %s", err, errOut)
	}

	release()
	deadline = time.Now().Add(15 * time.Second)
	for {
		out, errOut, err := kubectlWith(aliceConfig, "get", "configmaps", "-n", "default")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice after the seat was freed: %v %s %s", err, out, errOut)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rowMatches reports whether a debug dump has a row starting with first
// whose column col (0-based) is want.
func rowMatches(dump, first string, col int, want string) bool {
	for _, line := range strings.Split(dump, "\n") {
		cells := strings.Split(line, ",")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if len(cells) > col && cells[0] == first && cells[col] == want {
			return true
		}
	}
	return false
}

// healthForStrangers is the spec's example: every request of
// system:unauthenticated for the health endpoints is exempt.
const healthForStrangers = `apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: health-for-strangers
spec:
  matchingPrecedence: 1000
  priorityLevelConfiguration:
    name: exempt
  rules:
    - nonResourceRules:
      - nonResourceURLs:
          - "/healthz"
          - "/livez"
          - "/readyz"
        verbs:
          - "*"
      subjects:
        - kind: Group
          group:
            name: "system:unauthenticated"
`

// TestHealthForStrangers: the spec's health-for-strangers FlowSchema,
// applied with kubectl once the suggested probes schema is taken over
// (autoupdate-spec false) and moved after it (precedence 2000),
// classifies anonymous GETs of /healthz, /livez and /readyz: they are
// served (200) with the X-Kubernetes-PF-* headers of that schema and of
// the exempt level. Before, the same probes carry the probes schema's.
func TestHealthForStrangers(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	anonymous := cp.anonymousHTTP()
	uid := func(kind, name string) string {
		return cp.kubectl("get", kind, name, "-o", "jsonpath={.metadata.uid}")
	}
	exemptLevel := uid("prioritylevelconfiguration", "exempt")
	// classifiedBy GETs path without credentials until the answer names
	// the flow schema of UID schema (the gateway applies a change
	// within a second or so), for at most 15s; it must be a 200 of the
	// exempt level.
	classifiedBy := func(path, name, schema string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, err := anonymous.Get(cp.url(path))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := resp.Header.Get("X-Kubernetes-PF-FlowSchema-UID"); got == schema || time.Now().After(deadline) {
				if resp.StatusCode != 200 || got != schema || resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID") != exemptLevel {
					t.Errorf("anonymous GET %s: %d %v, want 200 from %s (%s) at exempt (%s)", path, resp.StatusCode, resp.Header, name, schema, exemptLevel)
				}
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	classifiedBy("/healthz", "probes", uid("flowschema", "probes"))

	cp.kubectl("annotate", "flowschema", "probes", "apf.kubernetes.io/autoupdate-spec=false", "--overwrite")
	cp.kubectl("patch", "flowschema", "probes", "--type=merge", "-p", `{"spec":{"matchingPrecedence":2000}}`)
	cp.kubectl("apply", "-f", manifest(t, "health-for-strangers.yaml", healthForStrangers))
	strangers := uid("flowschema", "health-for-strangers")
	for _, path := range []string{"/healthz", "/livez", "/readyz"} {
		classifiedBy(path, "health-for-strangers", strangers)
	}
	// The probes schema keeps what it was given: the servers do not own it.
	if got := cp.kubectl("get", "flowschema", "probes", "-o", "jsonpath={.spec.matchingPrecedence}"); got != "2000" {
		t.Errorf("probes' precedence %q, want 2000", got)
	}
}
