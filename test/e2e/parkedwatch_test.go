package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/pki"
)

// The tests in this file cover watches over HTTP/2 that park while idle
// (the gateway's watchpark): their handler returns, and each event is
// written into the connection by a goroutine that lives only while it
// delivers.

// adminTLS is the admin's client TLS configuration for cp, offering protos.
func adminTLS(t *testing.T, cp *controlPlane, protos ...string) *tls.Config {
	t.Helper()
	pdir := filepath.Join(cp.dataDir, "pki")
	conf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	conf.NextProtos = protos
	return conf
}

// h2Client is an admin client over one HTTP/2 connection at a time;
// closeConns closes the connections it dialed.
type h2Client struct {
	*http.Client
	mu    sync.Mutex
	conns []net.Conn
}

func newH2Client(t *testing.T, cp *controlPlane) *h2Client {
	c := &h2Client{}
	conf := adminTLS(t, cp, "h2")
	c.Client = &http.Client{Transport: &http2.Transport{
		TLSClientConfig: conf,
		DialTLSContext: func(ctx context.Context, network, addr string, cfg *tls.Config) (net.Conn, error) {
			conn, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, network, addr)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		},
	}}
	t.Cleanup(c.closeConns)
	return c
}

func (c *h2Client) closeConns() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// openWatch starts a JSON watch of namespace ns's ConfigMaps with query
// (after "watch=1&") and returns its body once the headers came.
func openWatch(ctx context.Context, t *testing.T, c *http.Client, cp *controlPlane, ns, query string) io.ReadCloser {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cp.url("/api/v1/namespaces/"+ns+"/configmaps?watch=1&"+query), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("watch: %s: %s", resp.Status, b)
	}
	return resp.Body
}

// readEvents reads n newline-delimited JSON events from r, as they came.
func readEvents(t *testing.T, r *bufio.Reader, n int) []string {
	t.Helper()
	var lines []string
	for len(lines) < n {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %d events: %v", len(lines), err)
		}
		lines = append(lines, line)
	}
	return lines
}

// gauge sums the values of /metrics lines of metric name whose labels
// contain every one of labels.
func (cp *controlPlane) gauge(ctx context.Context, name string, labels ...string) float64 {
	cp.t.Helper()
	body, err := cp.client().CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		cp.t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? (\S+)$`)
	sum := 0.0
	for _, m := range re.FindAllStringSubmatch(string(body), -1) {
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(m[1], l)
		}
		if v, err := strconv.ParseFloat(m[2], 64); ok && err == nil {
			sum += v
		}
	}
	return sum
}

// waitGauge waits until the gauge is want (a bound that catches a
// hang).
func (cp *controlPlane) waitGauge(ctx context.Context, want float64, name string, labels ...string) {
	cp.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := cp.gauge(ctx, name, labels...)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			cp.t.Fatalf("%s%v is %v, want %v", name, labels, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// watchingConfigMaps are the labels of the ConfigMap watches in
// apiserver_longrunning_requests.
var watchingConfigMaps = []string{`verb="WATCH"`, `resource="configmaps"`}

func createConfigMap(ctx context.Context, t *testing.T, cp *controlPlane, ns, name, data string) {
	t.Helper()
	_, err := cp.client().CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"d": data},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// currentRV is the resourceVersion of ns's ConfigMap list now.
func currentRV(ctx context.Context, t *testing.T, cp *controlPlane, ns string) string {
	t.Helper()
	l, err := cp.client().CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.ResourceVersion
}

func TestParkedWatches(t *testing.T) {
	cp := start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("same bytes as HTTP/1.1", func(t *testing.T) {
		// A watch over HTTP/1.1 waits on its handler's goroutine; over
		// HTTP/2 it parks. Both write the same bytes.
		ns := "parked-bytes"
		cp.createNamespace(ns)
		rv := currentRV(ctx, t, cp, ns)
		h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: adminTLS(t, cp, "http/1.1")}}
		h2 := newH2Client(t, cp)
		q := "resourceVersion=" + rv + "&allowWatchBookmarks=false"
		b1 := openWatch(ctx, t, h1, cp, ns, q)
		defer b1.Close()
		b2 := openWatch(ctx, t, h2.Client, cp, ns, q)
		defer b2.Close()
		for i := range 3 {
			createConfigMap(ctx, t, cp, ns, fmt.Sprintf("cm-%d", i), strings.Repeat("x", 100*i))
		}
		if err := cp.client().CoreV1().ConfigMaps(ns).Delete(ctx, "cm-1", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e1 := readEvents(t, bufio.NewReader(b1), 4)
		e2 := readEvents(t, bufio.NewReader(b2), 4)
		for i := range e1 {
			if e1[i] != e2[i] {
				t.Errorf("event %d differs:\nHTTP/1.1: %s\nHTTP/2:   %s", i, e1[i], e2[i])
			}
		}
		var ev struct{ Type string }
		if err := json.Unmarshal([]byte(e2[3]), &ev); err != nil || ev.Type != "DELETED" {
			t.Errorf("last event %q (%v), want a DELETED", e2[3], err)
		}
	})

	t.Run("no goroutine per idle watch; reset and connection close end them", func(t *testing.T) {
		ns := "parked-many"
		cp.createNamespace(ns)
		rv := currentRV(ctx, t, cp, ns)
		base := cp.gauge(ctx, "apiserver_longrunning_requests", watchingConfigMaps...)
		g0 := cp.gauge(ctx, "go_goroutines")
		const n = 300
		c := newH2Client(t, cp)
		wctx, cancelWatches := context.WithCancel(ctx)
		defer cancelWatches()
		halfCtx, cancelHalf := context.WithCancel(wctx)
		bodies := make([]*bufio.Reader, n)
		for i := range bodies {
			wc := wctx
			if i < n/2 {
				wc = halfCtx
			}
			bodies[i] = bufio.NewReader(openWatch(wc, t, c.Client, cp, ns, "resourceVersion="+rv))
		}
		cp.waitGauge(ctx, base+n, "apiserver_longrunning_requests", watchingConfigMaps...)
		if g1 := cp.gauge(ctx, "go_goroutines"); g1-g0 > n/3 {
			t.Errorf("goroutines %v → %v with %d idle watches open: want well under one per watch", g0, g1, n)
		}
		// Every parked watch delivers an event.
		createConfigMap(ctx, t, cp, ns, "wake", "1")
		for i, b := range bodies {
			if ev := readEvents(t, b, 1)[0]; !strings.Contains(ev, `"name":"wake"`) {
				t.Fatalf("watch %d got %s", i, ev)
			}
		}
		// The client resets half of them (RST_STREAM): they end.
		cancelHalf()
		cp.waitGauge(ctx, base+n/2, "apiserver_longrunning_requests", watchingConfigMaps...)
		// The connection closes: the rest end.
		c.closeConns()
		cp.waitGauge(ctx, base, "apiserver_longrunning_requests", watchingConfigMaps...)
	})

	t.Run("timeoutSeconds ends a parked watch", func(t *testing.T) {
		ns := "parked-timeout"
		cp.createNamespace(ns)
		c := newH2Client(t, cp)
		t0 := time.Now()
		body := openWatch(ctx, t, c.Client, cp, ns, "resourceVersion="+currentRV(ctx, t, cp, ns)+"&timeoutSeconds=2")
		defer body.Close()
		// The watch ends cleanly (END_STREAM, no error), with nothing sent.
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatalf("watch ended with %v after %v", err, time.Since(t0))
		}
		if len(b) != 0 {
			t.Errorf("watch sent %q", b)
		}
		if d := time.Since(t0); d < 2*time.Second {
			t.Errorf("watch ended after %v, before its timeout", d)
		}
	})

	t.Run("a slow reader holds up only its own watch", func(t *testing.T) {
		// Two watches on one connection; the client reads one only. The
		// other's stream window (4 MiB, the client's) fills, and what
		// is left of its events waits for the reader, while the read
		// watch gets every event.
		ns := "parked-slow"
		cp.createNamespace(ns)
		rv := currentRV(ctx, t, cp, ns)
		c := newH2Client(t, cp)
		slow := openWatch(ctx, t, c.Client, cp, ns, "resourceVersion="+rv)
		defer slow.Close()
		fast := bufio.NewReader(openWatch(ctx, t, c.Client, cp, ns, "resourceVersion="+rv))
		const objects = 12 // of 700 KiB: 8.4 MB, over the slow stream's window
		data := strings.Repeat("y", 700<<10)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range objects {
				createConfigMap(ctx, t, cp, ns, fmt.Sprintf("big-%d", i), data)
			}
		}()
		for i, ev := range readEvents(t, fast, objects) {
			if !strings.Contains(ev, fmt.Sprintf(`"name":"big-%d"`, i)) {
				t.Fatalf("fast watch's event %d is not big-%d", i, i)
			}
		}
		<-done
		// The slow reader still gets all its events once it reads.
		for i, ev := range readEvents(t, bufio.NewReader(slow), objects) {
			if !strings.Contains(ev, fmt.Sprintf(`"name":"big-%d"`, i)) {
				t.Fatalf("slow watch's event %d is not big-%d", i, i)
			}
		}
	})
}
