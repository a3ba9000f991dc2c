package deploy

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/netdelay"
)

// A one-way link probe: how long a small message takes from a process in
// one region to a process in another.
//
// The simulated link is a netdelay.Proxy in the test process, so a
// message between two regions' processes wakes three processes in turn
// (the sender's write wakes the proxy, whose write after the delay wakes
// the receiver), where a real network wakes only the receiver. Between
// the watched writes every process here is idle, and an idle process
// takes tens to hundreds of microseconds to run again once woken
// (docs/deploy.md). linkRTT's round trip, timed inside the test process
// where its proxy runs, does not pay the proxy's own wake-up; a member's
// message does. The probe pays it as they do: its sender and its receiver
// are processes of their own (this test binary run again, runLinkProbe),
// the sender writing one message every probeGap; it times the same
// messages once through a proxy from another region and once from a
// process in the receiver's own region (regions reach each other only
// through the proxies), and the difference of the two p50s is what the
// simulated link adds to a message between two processes.

// linkProbeEnv names the probe's role when this binary runs as a probe:
// "recv:ADDR" or "send:ADDR,N,GAP".
const linkProbeEnv = "MERIDIAN_LINK_PROBE"

// probeGap is the pause between probe messages: about the watched
// writes' own spacing, so that both ends are as idle as the members,
// watchfanouts and gateways are when a write's notice arrives.
const probeGap = 20 * time.Millisecond

// runLinkProbe runs this process as a probe when linkProbeEnv says so,
// and reports whether it did (TestMain then exits with code).
func runLinkProbe() (code int, ran bool) {
	role := os.Getenv(linkProbeEnv)
	if role == "" {
		return 0, false
	}
	if err := linkProbe(role); err != nil {
		fmt.Fprintln(os.Stderr, "link probe:", err)
		return 1, true
	}
	return 0, true
}

// linkProbe is one probe: a receiver prints, for each 8-byte message (the
// sender's clock when it wrote it, UnixNano), the nanoseconds since then
// on a line of its own; a sender writes n of them gap apart. Both run on
// one machine, so they share the clock.
func linkProbe(role string) error {
	kind, rest, _ := strings.Cut(role, ":")
	switch kind {
	case "recv":
		lis, err := net.Listen("tcp", rest)
		if err != nil {
			return err
		}
		fmt.Println("listening")
		c, err := lis.Accept()
		if err != nil {
			return err
		}
		lis.Close()
		out := bufio.NewWriter(os.Stdout)
		defer out.Flush()
		var b [8]byte
		for {
			if _, err := io.ReadFull(c, b[:]); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			fmt.Fprintln(out, time.Now().UnixNano()-int64(binary.BigEndian.Uint64(b[:])))
		}
	case "send":
		parts := strings.Split(rest, ",")
		if len(parts) != 3 {
			return fmt.Errorf("send wants ADDR,N,GAP, not %q", rest)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil {
			return err
		}
		gap, err := time.ParseDuration(parts[2])
		if err != nil {
			return err
		}
		c, err := net.Dial("tcp", parts[0])
		if err != nil {
			return err
		}
		defer c.Close()
		var b [8]byte
		for range n {
			time.Sleep(gap)
			binary.BigEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
			if _, err := c.Write(b[:]); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("unknown role %q", role)
}

// probePort is the port the probes' receiver listens on.
const probePort = 2499

// oneWay times n messages, probeGap apart, from a process in region from
// to one in region to: sent to addr (region to's own address, or a proxy
// in front of it).
func (s *regionSim) oneWay(from, to int, addr string, n int) latencies {
	s.t.Helper()
	self, err := os.Executable()
	if err != nil {
		s.t.Fatal(err)
	}
	run := func(r int, role string) *exec.Cmd {
		cmd := exec.Command("ip", "netns", "exec", s.netns[r], self, "-test.run=^$")
		cmd.Env = append(os.Environ(), linkProbeEnv+"="+role)
		return cmd
	}
	recv := run(to, fmt.Sprintf("recv:%s:%d", s.regionAddr(to), probePort))
	recv.Stderr = os.Stderr
	stdout, err := recv.StdoutPipe()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := recv.Start(); err != nil {
		s.t.Fatal(err)
	}
	defer recv.Wait()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "listening" {
		recv.Process.Kill()
		s.t.Fatalf("link probe receiver in region %c did not start: %v", 'a'+to, lines.Err())
	}
	send := run(from, fmt.Sprintf("send:%s,%d,%s", addr, n, probeGap))
	if out, err := send.CombinedOutput(); err != nil {
		recv.Process.Kill()
		s.t.Fatalf("link probe sender in region %c: %v: %s", 'a'+from, err, out)
	}
	var l latencies
	for lines.Scan() {
		ns, err := strconv.ParseInt(lines.Text(), 10, 64)
		if err != nil {
			s.t.Fatalf("link probe receiver: %q: %v", lines.Text(), err)
		}
		l = append(l, time.Duration(ns))
	}
	if len(l) != n {
		s.t.Fatalf("link probe: region %c received %d of %d messages", 'a'+to, len(l), n)
	}
	return l
}

// linkOneWay is what the simulated link adds to a message between two
// processes, from region from to region to: the p50 of n probe messages
// through a proxy like the members' (regionRTT/2) less the p50 of n sent
// from another process in region to; it logs both.
func (s *regionSim) linkOneWay(from, to, n int) time.Duration {
	s.t.Helper()
	proxy := s.proxyAddr(from, 190+to) // apart from the members' (k < 190)
	if out, err := exec.Command("ip", "addr", "add", proxy+"/32", "dev", s.bridge).CombinedOutput(); err != nil {
		s.t.Fatalf("ip addr add %s: %v: %s", proxy, err, out)
	}
	netdelay.Start(s.t, fmt.Sprintf("%s:%d", proxy, probePort), fmt.Sprintf("%s:%d", s.regionAddr(to), probePort), regionRTT/2)
	direct := s.oneWay(to, to, fmt.Sprintf("%s:%d", s.regionAddr(to), probePort), n)
	linked := s.oneWay(from, to, fmt.Sprintf("%s:%d", proxy, probePort), n)
	cost := linked.quantile(0.5) - direct.quantile(0.5)
	s.t.Logf("one-way, process to process, region %c to %c: through the link %s; within region %c %s: the link adds %s (p50)",
		'a'+from, 'a'+to, linked, 'a'+to, direct, cost.Round(10*time.Microsecond))
	return cost
}
