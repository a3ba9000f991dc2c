package audit

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// receiver is an HTTPS audit webhook that records the EventLists POSTed
// to it with the right token. hold, when set, holds every request until
// closed.
type receiver struct {
	srv     *httptest.Server
	mu      sync.Mutex
	batches [][]string // audit IDs of each POST
	hold    chan struct{}
}

func newReceiver(t *testing.T, hold chan struct{}) *receiver {
	rc := &receiver{hold: hold}
	rc.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc.hold != nil {
			select {
			case <-rc.hold:
			case <-r.Context().Done():
				return
			}
		}
		var list auditv1.EventList
		if r.Header.Get("Authorization") != "Bearer hook-token" || r.Method != http.MethodPost ||
			json.NewDecoder(r.Body).Decode(&list) != nil || list.Kind != "EventList" || list.APIVersion != "audit.k8s.io/v1" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var ids []string
		for _, ev := range list.Items {
			ids = append(ids, string(ev.AuditID))
		}
		rc.mu.Lock()
		rc.batches = append(rc.batches, ids)
		rc.mu.Unlock()
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() [][]string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([][]string(nil), rc.batches...)
}

// kubeconfig names the receiver's URL, CA and the token to present.
func (rc *receiver) kubeconfig(t *testing.T) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["hook"] = &clientcmdapi.Cluster{Server: rc.srv.URL,
		CertificateAuthorityData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.srv.Certificate().Raw})}
	cfg.AuthInfos["gw"] = &clientcmdapi.AuthInfo{Token: "hook-token"}
	cfg.Contexts["hook"] = &clientcmdapi.Context{Cluster: "hook", AuthInfo: "gw"}
	cfg.CurrentContext = "hook"
	p := filepath.Join(t.TempDir(), "hook.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func event(i int) []byte {
	return []byte(fmt.Sprintf(`{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"e%d","stage":"ResponseComplete"}`+"\n", i))
}

// TestWebhookBatches: events go in EventLists of at most
// --audit-webhook-batch-max-size, over TLS with the kubeconfig's token;
// Close sends what is left.
func TestWebhookBatches(t *testing.T) {
	rc := newReceiver(t, nil)
	s, err := NewWebhookSink(WebhookOptions{ConfigFile: rc.kubeconfig(t), BatchMaxSize: 3, BatchMaxWait: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		s.Write(event(i))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(rc.got())
	if want := "[[e0 e1 e2] [e3 e4 e5] [e6]]"; got != want {
		t.Errorf("batches %s, want %s", got, want)
	}
	s.Write(event(8)) // after Close: dropped, no panic
}

// TestWebhookBatchMaxWait: a batch that does not fill goes after
// --audit-webhook-batch-max-wait.
func TestWebhookBatchMaxWait(t *testing.T) {
	rc := newReceiver(t, nil)
	s, err := NewWebhookSink(WebhookOptions{ConfigFile: rc.kubeconfig(t), BatchMaxSize: 100, BatchMaxWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Write(event(1))
	deadline := time.Now().Add(10 * time.Second) // bounds a hang only
	for len(rc.got()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a lone event was never sent")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := fmt.Sprint(rc.got()); got != "[[e1]]" {
		t.Errorf("batches %s", got)
	}
}

// TestSlowWebhookNeverBlocks: a webhook that does not answer holds one
// batch; the buffer fills and the events after it are dropped and
// counted (apiserver_audit_error_total{plugin="webhook"}), and Write
// never waits.
func TestSlowWebhookNeverBlocks(t *testing.T) {
	hold := make(chan struct{})
	rc := newReceiver(t, hold)
	s, err := NewWebhookSink(WebhookOptions{ConfigFile: rc.kubeconfig(t), BatchMaxSize: 1, BatchMaxWait: time.Millisecond, BufferSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a, err := NewAuditor(mustPolicy(t, everythingAtRequestResponse), nil, nil, reg, s)
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	wrote := make(chan struct{})
	go func() {
		for i := range n {
			a.write(event(i))
		}
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(30 * time.Second): // bounds a hang only
		t.Fatal("writing events waited for the webhook")
	}
	// At most BufferSize events wait and one batch is in flight.
	dropped := testutil.ToFloat64(a.metrics.errors.WithLabelValues("webhook"))
	if dropped < n-4-1 || dropped > n {
		t.Errorf("%v events dropped, want at least %d", dropped, n-4-1)
	}
	close(hold)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, b := range rc.got() {
		sent += len(b)
	}
	if sent+int(dropped) != n {
		t.Errorf("%d sent + %v dropped != %d written", sent, dropped, n)
	}
}

// TestDownWebhook: failed POSTs are counted, and Close returns within the
// POST timeout however many batches are left.
func TestDownWebhook(t *testing.T) {
	rc := newReceiver(t, nil)
	cfg := rc.kubeconfig(t)
	rc.srv.Close()
	s, err := NewWebhookSink(WebhookOptions{ConfigFile: cfg, BatchMaxSize: 1, BatchMaxWait: time.Millisecond, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewAuditor(mustPolicy(t, everythingAtRequestResponse), nil, nil, prometheus.NewRegistry(), s)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		a.write(event(i))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if lost := testutil.ToFloat64(a.metrics.errors.WithLabelValues("webhook")); lost != 20 {
		t.Errorf("%v events counted lost, want 20", lost)
	}
	if _, err := NewWebhookSink(WebhookOptions{ConfigFile: filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing webhook kubeconfig was accepted")
	}
}
