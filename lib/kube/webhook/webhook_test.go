package webhook_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/webhook"
	"github.com/meridian-cp/meridian/lib/kube/webhook/webhooktest"
)

func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"path":"` + r.URL.Path + `","timeout":"` + r.URL.Query().Get("timeout") + `","body":` + string(body) + `}`))
}

func TestPostURL(t *testing.T) {
	srv := webhooktest.Start(t, http.HandlerFunc(echo))
	c := webhook.New(webhook.Options{})
	defer c.Close()
	got, err := c.Post(context.Background(), webhook.ClientConfig{URL: srv.URL + "/validate", CABundle: srv.CABundle}, 5*time.Second, []byte(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"path":"/validate","timeout":"5s","body":{"a":1}}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// A Service reference resolves as <name>.<namespace>.svc:<port>, and the
// certificate is verified for that name.
func TestPostService(t *testing.T) {
	srv := webhooktest.Start(t, http.HandlerFunc(echo), "hook.team.svc")
	var dialed []string
	c := webhook.New(webhook.Options{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		return (&net.Dialer{}).DialContext(ctx, network, srv.Addr)
	}})
	cfg := webhook.ClientConfig{Service: &webhook.ServiceReference{Namespace: "team", Name: "hook", Path: "/m", Port: 8443}, CABundle: srv.CABundle}
	got, err := c.Post(context.Background(), cfg, 0, []byte(`1`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"path":"/m","timeout":"10s","body":1}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if len(dialed) != 1 || dialed[0] != "hook.team.svc:8443" {
		t.Fatalf("dialed %v, want [hook.team.svc:8443]", dialed)
	}
}

// A certificate not issued by the caBundle's CA is refused.
func TestPostWrongCA(t *testing.T) {
	srv := webhooktest.Start(t, http.HandlerFunc(echo))
	other := webhooktest.Start(t, http.HandlerFunc(echo))
	c := webhook.New(webhook.Options{})
	_, err := c.Post(context.Background(), webhook.ClientConfig{URL: srv.URL, CABundle: other.CABundle}, time.Second, []byte(`{}`))
	var we *webhook.Error
	if !errors.As(err, &we) || we.Timeout || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("got %v, want a certificate error", err)
	}
}

// A webhook that does not answer costs the caller its timeout, not more.
func TestPostTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer close(release)
	c := webhook.New(webhook.Options{})
	start := time.Now()
	_, err := c.Post(context.Background(), webhook.ClientConfig{URL: srv.URL, CABundle: srv.CABundle}, time.Second, []byte(`{}`))
	var we *webhook.Error
	if !errors.As(err, &we) || !we.Timeout || !errors.Is(err, webhook.ErrTimeout) {
		t.Fatalf("got %v, want a timeout", err)
	}
	if !strings.Contains(err.Error(), "context deadline exceeded") || strings.Contains(err.Error(), "timeout=") {
		t.Fatalf("message %q: want the cause and no query", err)
	}
	// A bound that catches a hang, not a timing assertion.
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("call took %s with a 1s timeout", d)
	}
}

func TestPostBounds(t *testing.T) {
	srv := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/err" {
			http.Error(w, "no", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte(strings.Repeat("x", 2048)))
	}))
	c := webhook.New(webhook.Options{MaxResponseBytes: 1024})
	cfg := webhook.ClientConfig{URL: srv.URL, CABundle: srv.CABundle}
	if _, err := c.Post(context.Background(), cfg, time.Second, nil); !errors.Is(err, webhook.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	cfg.URL += "/err"
	_, err := c.Post(context.Background(), cfg, time.Second, nil)
	var we *webhook.Error
	if !errors.As(err, &we) || we.StatusCode != 500 {
		t.Fatalf("got %v, want status 500", err)
	}
}

func TestAddressInvalid(t *testing.T) {
	for _, cfg := range []webhook.ClientConfig{
		{},
		{URL: "http://x"},
		{URL: "https://user:secret@x"},
		{URL: "https://x#f"},
		{URL: "https://x", Service: &webhook.ServiceReference{Namespace: "a", Name: "b"}},
		{Service: &webhook.ServiceReference{Name: "b"}},
	} {
		_, err := webhook.Address(cfg)
		if err == nil {
			t.Errorf("%+v: no error", cfg)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q shows the URL's password", err)
		}
	}
}
