package h2conn

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// newServer starts an HTTPS server whose HTTP/2 connections s serves with
// h; it requests client certificates.
func newServer(t *testing.T, s *Server, h http.Handler) *httptest.Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(h)
	ts.EnableHTTP2 = true
	ts.Config.TLSConfig = &tls.Config{ClientAuth: tls.RequestClientCert}
	Configure(ts.Config, s)
	ts.TLS = ts.Config.TLSConfig
	ts.StartTLS()
	t.Cleanup(ts.Close)
	return ts
}

// clientCert is a self-signed client certificate.
func clientCert(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "alice", Organization: []string{"devs"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// netHTTPClient is net/http's client, HTTP/2 only, with small receive
// windows when small is set.
func netHTTPClient(ts *httptest.Server, cert *tls.Certificate, small bool) *http.Client {
	tr := ts.Client().Transport.(*http.Transport).Clone()
	if cert != nil {
		tr.TLSClientConfig.Certificates = []tls.Certificate{*cert}
	}
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP2(true)
	if small {
		tr.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: 4 << 10, MaxReceiveBufferPerConnection: 64 << 10}
	}
	return &http.Client{Transport: tr}
}

// x2Client is golang.org/x/net/http2's client.
func x2Client(ts *httptest.Server) *http.Client {
	base := ts.Client().Transport.(*http.Transport)
	return &http.Client{Transport: &http2.Transport{TLSClientConfig: base.TLSClientConfig.Clone()}}
}

func TestRequestAndResponse(t *testing.T) {
	cert := clientCert(t)
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var subject string
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			subject = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read body: %v", err)
		}
		w.Header().Set("X-Echo", r.Header.Get("X-Test"))
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s %s %s %s q=%s cert=%s remote=%t cl=%d body=%s",
			r.Proto, r.Method, r.Host, r.URL.Path, r.URL.Query().Get("q"), subject, r.RemoteAddr != "", r.ContentLength, body)
	}))
	for name, client := range map[string]*http.Client{"net/http": netHTTPClient(ts, &cert, false), "x/net/http2": x2Client(ts)} {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for i := range 50 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequest("POST", ts.URL+"/a/b?q="+fmt.Sprint(i), strings.NewReader("hello"))
					req.Header.Set("X-Test", fmt.Sprint("v", i))
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					defer resp.Body.Close()
					got, _ := io.ReadAll(resp.Body)
					wantCert := ""
					if name == "net/http" {
						wantCert = "alice"
					}
					want := fmt.Sprintf("HTTP/2.0 POST %s /a/b q=%d cert=%s remote=true cl=5 body=hello", strings.TrimPrefix(ts.URL, "https://"), i, wantCert)
					if string(got) != want || resp.ProtoMajor != 2 {
						t.Errorf("got %q (%s), want %q", got, resp.Proto, want)
					}
					if resp.Header.Get("X-Echo") != fmt.Sprint("v", i) || resp.ContentLength != int64(len(want)) || resp.Header.Get("Date") == "" {
						t.Errorf("headers %v, content length %d", resp.Header, resp.ContentLength)
					}
				}()
			}
			wg.Wait()
		})
	}
}

func TestResponseSemantics(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/sniff", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "<html><body>hi</body></html>") })
	mux.HandleFunc("/empty", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("/nocontent", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
		if _, err := w.Write([]byte("x")); !errors.Is(err, http.ErrBodyNotAllowed) {
			t.Errorf("write after 204: %v", err)
		}
	})
	mux.HandleFunc("/declared", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		w.Write([]byte("abc"))
		if _, err := w.Write([]byte("d")); !errors.Is(err, http.ErrContentLength) {
			t.Errorf("write past Content-Length: %v", err)
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 10000))
	})
	mux.HandleFunc("/snapshot", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("A", "1")
		w.WriteHeader(201)
		w.Header().Set("B", "2") // after WriteHeader: not sent
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status")
		w.Write([]byte("body"))
		w.Header().Set("Grpc-Status", "0")
	})
	ts := newServer(t, &Server{}, mux)
	client := netHTTPClient(ts, nil, false)
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := client.Get(ts.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(b)
	}
	if resp, _ := get("/sniff"); resp.Header.Get("Content-Type") != "text/html; charset=utf-8" || resp.ContentLength != 28 {
		t.Errorf("/sniff: %v %d", resp.Header, resp.ContentLength)
	}
	if resp, body := get("/empty"); resp.StatusCode != 200 || body != "" || resp.Header.Get("Content-Length") != "0" {
		t.Errorf("/empty: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp, _ := get("/nocontent"); resp.StatusCode != 204 {
		t.Errorf("/nocontent: %d", resp.StatusCode)
	}
	if resp, body := get("/declared"); body != "abc" || resp.ContentLength != 3 {
		t.Errorf("/declared: %q %d", body, resp.ContentLength)
	}
	if resp, body := get("/big"); len(body) != 10000 || resp.ContentLength != -1 {
		t.Errorf("/big: %d bytes, content length %d", len(body), resp.ContentLength)
	}
	if resp, _ := get("/snapshot"); resp.StatusCode != 201 || resp.Header.Get("A") != "1" || resp.Header.Get("B") != "" {
		t.Errorf("/snapshot: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, body := get("/trailers"); body != "body" || resp.Trailer.Get("Grpc-Status") != "0" {
		t.Errorf("/trailers: %q %v", body, resp.Trailer)
	}
	resp, err := client.Head(ts.URL + "/big")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("HEAD: %d", resp.StatusCode)
	}
}

// TestFlowControl sends a large body to a handler that echoes it as it
// reads, with small windows both ways: the server's receive windows and
// the client's.
func TestFlowControl(t *testing.T) {
	s := &Server{StreamWindow: 8 << 10, ConnWindow: 64 << 10, MaxPending: 16 << 10}
	ts := newServer(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(w, r.Body); err != nil {
			t.Errorf("echo: %v", err)
		}
	}))
	client := netHTTPClient(ts, nil, true)
	payload := make([]byte, 3<<20)
	_, _ = rand.Read(payload)
	want := sha256.Sum256(payload)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(ts.URL, "application/octet-stream", bytes.NewReader(payload))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			n, err := io.Copy(h, resp.Body)
			if err != nil || n != int64(len(payload)) || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Errorf("echo: %d bytes, %v, digest match %t", n, err, bytes.Equal(h.Sum(nil), want[:]))
			}
		}()
	}
	wg.Wait()
}

// TestBackPressure: a client that stops reading holds the handler's Write
// once the windows are used up.
func TestBackPressure(t *testing.T) {
	blocked := make(chan int64, 1)
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 16<<10)
		var n int64
		for {
			done := make(chan error, 1)
			go func() { _, err := w.Write(chunk); done <- err }()
			select {
			case err := <-done:
				if err != nil {
					return
				}
				n += int64(len(chunk))
			case <-time.After(500 * time.Millisecond):
				blocked <- n
				<-r.Context().Done()
				<-done
				return
			}
		}
	}))
	client := netHTTPClient(ts, nil, true)
	resp, err := client.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	n := <-blocked
	// The client's stream window is 4 KiB, connection window 64 KiB.
	if n > 1<<20 {
		t.Errorf("handler wrote %d bytes to a client that reads nothing", n)
	}
	resp.Body.Close()
}

func TestFlushStreams(t *testing.T) {
	release := make(chan struct{})
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"first":1}`)
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("flush: %v", err)
		}
		<-release
		io.WriteString(w, `{"second":2}`)
	}))
	client := x2Client(ts)
	resp, err := client.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64)
	n, err := resp.Body.Read(buf)
	if err != nil || string(buf[:n]) != `{"first":1}` {
		t.Fatalf("first read %q %v", buf[:n], err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != `{"second":2}` {
		t.Errorf("rest %q", rest)
	}
}

// TestCancel: the client's cancellation (RST_STREAM) ends the handler's
// context, and its writes fail.
func TestCancel(t *testing.T) {
	ended := make(chan error, 2)
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			for {
				if _, err := w.Write([]byte("event\n")); err != nil {
					ended <- err
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(time.Millisecond)
			}
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		ended <- context.Cause(r.Context())
	}))
	client := netHTTPClient(ts, nil, false)

	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/wait", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	if err := <-ended; !errors.Is(err, errStreamClosed) {
		t.Errorf("wait: context cause %v", err)
	}

	resp, err = client.Get(ts.URL + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 60)); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close() // mid-response: RST_STREAM CANCEL
	if err := <-ended; !errors.Is(err, errStreamClosed) {
		t.Errorf("stream: write error %v", err)
	}
}

// TestGracefulShutdown: Shutdown sends GOAWAY; the request in flight
// finishes, the connection closes after it.
func TestGracefulShutdown(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		io.WriteString(w, "done")
	}))
	client := netHTTPClient(ts, nil, false)
	res := make(chan string, 1)
	go func() {
		resp, err := client.Get(ts.URL + "/slow")
		if err != nil {
			res <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		res <- string(b)
	}()
	<-started
	shut := make(chan error, 1)
	go func() { shut <- ts.Config.Shutdown(context.Background()) }()
	// The GOAWAY reaches the client: its next request does not go on
	// this connection (and the listener is closed).
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := client.Get(ts.URL + "/fast")
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("requests still served after Shutdown")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if got := <-res; got != "done" {
		t.Errorf("in-flight request: %q", got)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestCloseEndsStreams: http.Server.Close ends the connections and the
// handlers' contexts.
func TestCloseEndsStreams(t *testing.T) {
	started := make(chan struct{})
	ended := make(chan struct{})
	ts := newServer(t, &Server{}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done()
		close(ended)
	}))
	client := netHTTPClient(ts, nil, false)
	go func() {
		if resp, err := client.Get(ts.URL); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	<-started
	ts.Config.Close()
	<-ended
}
