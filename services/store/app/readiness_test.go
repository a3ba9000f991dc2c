package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// slowLink forwards TCP connections to target, carrying what the dialer
// sends at no more than rate bytes per second per connection (the answers
// flow freely): a member whose raft peer address is a slowLink receives
// heartbeats at once but a backlog of entries slowly, so it knows the
// leader well before it has caught up.
type slowLink struct {
	lis    net.Listener
	target string
	rate   int

	mu    sync.Mutex
	conns []net.Conn
}

func newSlowLink(t *testing.T, target string, rate int) *slowLink {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{lis: lis, target: target, rate: rate}
	t.Cleanup(l.close)
	go l.accept()
	return l
}

func (l *slowLink) addr() string { return l.lis.Addr().String() }

func (l *slowLink) accept() {
	for {
		c, err := l.lis.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, up)
		l.mu.Unlock()
		go l.throttled(up, c)
		go func() { _, _ = io.Copy(c, up); c.Close(); up.Close() }()
	}
}

// throttled copies src to dst, pausing so that the bytes sent never run
// ahead of the rate since the connection opened (a pause that oversleeps
// on a loaded machine is made up for, not added up).
func (l *slowLink) throttled(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 4<<10)
	began, sent := time.Now(), 0
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			sent += n
			time.Sleep(time.Until(began.Add(time.Duration(sent) * time.Second / time.Duration(l.rate))))
		}
		if err != nil {
			return
		}
	}
}

func (l *slowLink) close() {
	l.lis.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
}

// readySample is what the test saw of a member at one moment.
type readySample struct {
	serving    bool
	leaderKnow bool
	member     bool
	lag        uint64 // behind the leader's commit index, in log entries
}

// watchReadiness samples a's readiness (its gRPC health, which /readyz
// reports) every 20ms, with the lag behind leader's commit index read
// before the health, until a reports SERVING, or fails the test after
// limit.
func watchReadiness(t *testing.T, a, leader *App, limit time.Duration) []readySample {
	t.Helper()
	var out []readySample
	deadline := time.Now().Add(limit)
	for {
		commit := leader.node.Status().CommitIndex
		resp, err := a.health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		st := a.node.Status()
		s := readySample{
			serving:    resp.GetStatus() == healthpb.HealthCheckResponse_SERVING,
			leaderKnow: st.LeaderID != "",
			member:     st.Member,
			lag:        a.node.Lag(commit),
		}
		out = append(out, s)
		if s.serving {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within %v; last sample %+v", limit, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkGated fails the test unless the member was seen not ready while it
// knew the leader (what readiness reported before it waited for catch-up)
// and was never seen ready while trailing by more than maxLag entries
// (plus slack for the few writes, such as address registrations, that can
// land between reading the leader's commit index and the health). With
// inConfig, some of the not-ready samples must also show the member in the
// configuration: readiness waited for the lag, not only for the join.
func checkGated(t *testing.T, what string, samples []readySample, maxLag uint64, inConfig bool) {
	t.Helper()
	const slack = 8
	var gated, behindInConfig int
	var maxSeen uint64
	for _, s := range samples {
		if s.serving && s.lag > maxLag+slack {
			t.Errorf("%s: ready while %d entries behind the leader (ready within %d)", what, s.lag, maxLag)
		}
		if !s.serving && s.leaderKnow {
			gated++
			if s.member && s.lag > maxLag {
				behindInConfig++
			}
		}
		maxSeen = max(maxSeen, s.lag)
	}
	if gated == 0 {
		t.Errorf("%s: never seen not ready while knowing the leader (%d samples, max lag %d): the link was not slow enough to test the gate", what, len(samples), maxSeen)
	}
	if inConfig && behindInConfig == 0 {
		t.Errorf("%s: never seen not ready while in the configuration and behind by more than %d (max lag %d)", what, maxLag, maxSeen)
	}
	t.Logf("%s: %d samples, %d not ready with a leader known (%d of them in the configuration and behind), max lag %d entries, ready at lag %d",
		what, len(samples), gated, behindInConfig, maxSeen, samples[len(samples)-1].lag)
}

// TestMemberNotReadyUntilCaughtUp: a member that joins a cluster with a
// backlog, and the same member restarted after missing writes, report
// NOT_SERVING (so /readyz fails, and a StatefulSet's rolling update
// waits) while they know the leader but have not caught up with its
// commit index, and SERVING once they trail it by at most ReadyMaxLag
// entries. Its raft traffic comes through a slow link, so that catching
// up takes seconds.
func TestMemberNotReadyUntilCaughtUp(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, clusterConfigs(t, certs, 3)...)
	for _, nd := range nodes {
		t.Cleanup(nd.stop)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cc := dialOne(t, certs, nodes[0])
	value := strings.Repeat("v", 8<<10)
	backlog := func(prefix string, n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					// A put is retried when an election interrupts it
					// (a loaded machine): writing the same value twice
					// is harmless here.
					var err error
					for attempt := 0; attempt < 20; attempt++ {
						if _, err = putVia(ctx, cc, fmt.Sprintf("%s-%d", prefix, i), value); err == nil {
							break
						}
						time.Sleep(100 * time.Millisecond)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("backlog: %v", err)
		}
	}
	backlog("before-join", 240)

	const maxLag = 16
	addrs := daemontest.FreeAddrs(t, 2)
	joiner := nodes[0].cfg
	joiner.ID, joiner.DataDir, joiner.PeerAddress, joiner.ClientAddress = "s3", t.TempDir(), addrs[0], addrs[1]
	joiner.InitialCluster, joiner.Join, joiner.ReadyMaxLag = nil, endpoints(nodes), maxLag
	// 1 MiB/s: the 1.9 MiB backlog takes about two seconds to arrive.
	link := newSlowLink(t, joiner.PeerAddress, 1<<20)
	joiner.PeerAdvertise = link.addr()

	nd := startNodes(t, joiner)[0]
	t.Cleanup(nd.stop)
	leader, _ := awaitLeader(t, nodes)
	checkGated(t, "joined", watchReadiness(t, nd.app, leader.app, time.Minute), maxLag, false)

	// Restarted after missing writes: in the configuration from the start.
	nd.stop()
	backlog("while-down", 240)
	nd = startNodes(t, joiner)[0]
	t.Cleanup(nd.stop)
	leader, _ = awaitLeader(t, nodes)
	checkGated(t, "restarted", watchReadiness(t, nd.app, leader.app, time.Minute), maxLag, true)
}
