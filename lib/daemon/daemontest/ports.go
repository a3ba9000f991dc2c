package daemontest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Free addresses for servers that bind an address given to them (a
// binary's --listen, raft's transport, a member named in another's
// configuration before it starts).
//
// A port the kernel picked (":0") and the test released can be handed by
// the kernel to anything else before the server binds it: every ":0"
// listener and every outgoing connection of every process draws from the
// ephemeral range. So FreeAddrs picks ports below that range, which the
// kernel never hands out by itself, and reserves each one across the
// machine's test processes with an exclusive lock on a file named after
// it, held until the test ends (and dropped by the kernel if the process
// dies). A port is taken only if it is not locked and can be bound then.

// portFloor is the lowest port FreeAddrs picks, above the ports of
// well-known services.
const portFloor = 20000

// defaultEphemeralLow is Linux's default start of the ephemeral range,
// for when /proc does not say.
const defaultEphemeralLow = 32768

// FreeAddrs returns n distinct loopback addresses reserved for the test:
// free now, outside the kernel's ephemeral range, and picked by no other
// test (of any process using this package) until the test ends.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "meridian-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	high := ephemeralLow()
	if high <= portFloor {
		t.Fatalf("daemontest: the ephemeral port range starts at %d, at or below %d: no port outside it to reserve", high, portFloor)
	}
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n+1000 {
			t.Fatalf("daemontest: no free port in [%d, %d) after %d tries", portFloor, high, tries)
		}
		port := portFloor + rand.IntN(high-portFloor)
		addr, ok := reserve(t, dir, port)
		if ok {
			out = append(out, addr)
		}
	}
	return out
}

// reserve locks port's file in dir and checks that the port can be bound
// on 127.0.0.1. It returns the address and true if so (the lock held
// until the test ends), false if another test holds the port or anything
// listens on it.
func reserve(t testing.TB, dir string, port int) (string, bool) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return "", false
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		f.Close()
		return "", false
	}
	l.Close()
	t.Cleanup(func() { f.Close() }) // closing the file drops the lock
	return addr, true
}

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeralLow
	}
	var low, high int
	if _, err := fmt.Sscan(string(b), &low, &high); err != nil || low <= 0 {
		return defaultEphemeralLow
	}
	return low
}
