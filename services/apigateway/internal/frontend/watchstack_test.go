//go:build !race

package frontend

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/genproto/googleapis/api/httpbody"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
)

// idleWatches is a ResourceService whose watches go deep while they
// start (as authentication and flow control do, growing the goroutine's
// stack to 16 KiB) and then wait, idle, until the client goes away.
type idleWatches struct {
	recordingService
	waiting atomic.Int64
}

func (s *idleWatches) Watch(_ *apiv1.WatchRequest, stream apiv1.ResourceService_WatchServer) error {
	deep(48)
	if err := stream.Send(&httpbody.HttpBody{ContentType: jsonStream}); err != nil {
		return err
	}
	s.waiting.Add(1)
	<-stream.Context().Done()
	return nil
}

// deep recurses n times with 256 bytes of frame each.
//
//go:noinline
func deep(n int) byte {
	var pad [256]byte
	pad[n%256] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return deep(n-1) + pad[n%256]
}

// TestIdleWatchStackShrinks: the frames a watch waits under, from
// net/http's HTTP/2 handler down to the ResourceService's Watch, stay
// small enough for collections to shrink the stack a watch's start grew
// to 16 KiB (they halve a parked goroutine's stack only while it uses
// under a quarter of it), so an idle watch keeps 8 KiB of stack, not 16.
// The watches are opened over a raw HTTP/2 connection, which holds no
// goroutine per stream in the test's process.
func TestIdleWatchStackShrinks(t *testing.T) {
	svc := &idleWatches{}
	srv := httptest.NewUnstartedServer(newTestHandler(t, svc, nil, func(c *Config) { c.LocalResources = svc }))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	conn, err := tls.Dial("tcp", strings.TrimPrefix(srv.URL, "https://"), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The server's frames are read (and its settings acknowledged)
	// until the connection closes.
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if s, ok := f.(*http2.SettingsFrame); ok && !s.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		}
	}()

	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const watches = 200
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for i := range watches {
		hb.Reset()
		for _, f := range []hpack.HeaderField{
			{Name: ":method", Value: http.MethodGet}, {Name: ":scheme", Value: "https"},
			{Name: ":authority", Value: "localhost"}, {Name: ":path", Value: "/api/v1/namespaces/demo/configmaps?watch=1"},
			{Name: "authorization", Value: "Bearer admin-token"},
		} {
			if err := enc.WriteField(f); err != nil {
				t.Fatal(err)
			}
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: uint32(2*i + 1), BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
	}
	// Every watch reaches its wait: the handlers are parked.
	for deadline := time.Now().Add(time.Minute); svc.waiting.Load() < watches; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d watches started", svc.waiting.Load(), watches)
		}
	}
	// Each collection halves a parked stack at most once.
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	perWatch := (int64(after.StackInuse) - int64(before.StackInuse)) / watches
	t.Logf("goroutine stacks: %d bytes per idle watch", perWatch)
	if perWatch > 12<<10 {
		t.Errorf("idle watches hold %d bytes of stack each, want 8 KiB: the frames under a watch's wait grew past a quarter of 16 KiB", perWatch)
	}
}
