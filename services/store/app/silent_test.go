package app

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// silenceProxy forwards TCP connections to a member's client address until
// silence is called; from then on it carries nothing, either way, and
// closes nothing — what a client sees of a member whose network was cut
// (docker network disconnect, a partition): connections that stay open
// and never answer.
type silenceProxy struct {
	lis    net.Listener
	target string

	mu     sync.Mutex
	silent bool
	quiet  chan struct{} // closed by silence
	conns  []net.Conn
}

func newSilenceProxy(t *testing.T, target string) *silenceProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silenceProxy{lis: lis, target: target, quiet: make(chan struct{})}
	t.Cleanup(p.close)
	go p.accept()
	return p
}

func (p *silenceProxy) addr() string { return p.lis.Addr().String() }

func (p *silenceProxy) accept() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		silent := p.silent
		p.mu.Unlock()
		if silent {
			continue // accepted, never answered
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, up)
		p.mu.Unlock()
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies src to dst until either fails or the proxy falls silent;
// then it stops copying and leaves both open.
func (p *silenceProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-p.quiet:
			return // what was read is dropped, as by a cut network
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *silenceProxy) silence() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.silent {
		p.silent = true
		close(p.quiet)
	}
}

func (p *silenceProxy) close() {
	_ = p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// TestSilentLeaderFailsWritesFastAndReadsOver: when the member a client
// sends to (the leader) stops answering without closing anything, as
// when its network is cut, a write does not hang until the caller's
// deadline: it fails with DEADLINE_EXCEEDED, saying the member stopped
// answering, while the caller's context still runs; the next write goes
// to another member (which forwards it) and succeeds, and a read is
// retried on another member and succeeds. The write that failed was never
// delivered, and nothing of it is stored.
func TestSilentLeaderFailsWritesFastAndReadsOver(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, clusterConfigs(t, certs, 3)...)
	for _, nd := range nodes {
		t.Cleanup(nd.stop)
	}
	leader, followers := awaitLeader(t, nodes)
	// The leader first: the client prefers its first endpoint until it
	// learns the leader (it cannot here: the members' client addresses
	// are not the proxies').
	var proxies []*silenceProxy
	var eps []string
	for _, nd := range append([]*node{leader}, followers...) {
		p := newSilenceProxy(t, nd.cfg.ClientAddress)
		proxies = append(proxies, p)
		eps = append(eps, p.addr())
	}
	dial := func() *client.Client {
		c, err := client.Dial(eps, certs.Client(), client.Options{ProbeInterval: 200 * time.Millisecond, ProbeTimeout: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	writer, reader := dial(), dial()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	// Both clients have a working connection to the leader.
	if _, err := putVia(ctx, writer, "before", "v"); err != nil {
		t.Fatalf("put before the silence: %v", err)
	}
	if _, _, err := getVia(ctx, reader, "before", false); err != nil {
		t.Fatalf("get before the silence: %v", err)
	}

	proxies[0].silence()
	began := time.Now()
	_, err = putVia(ctx, writer, "lost", "v")
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "stopped answering") || ctx.Err() != nil {
		t.Fatalf("put to the silent leader: %v (caller's context: %v); want DEADLINE_EXCEEDED saying the member stopped answering", err, ctx.Err())
	}
	t.Logf("the put to the silent leader failed after %v: %v", time.Since(began).Round(time.Millisecond), err)
	if _, err := putVia(ctx, writer, "after", "v"); err != nil {
		t.Fatalf("the next put: %v", err)
	}
	// A linearizable read is retried on another member.
	if v, _, err := getVia(ctx, reader, "after", false); err != nil || v != "v" {
		t.Fatalf("get after the silence: %q, %v; want %q", v, err, "v")
	}
	if v, _, err := getVia(ctx, reader, "lost", false); err != nil || v != "" {
		t.Fatalf("get of the failed put: %q, %v; want nothing stored", v, err)
	}
}
