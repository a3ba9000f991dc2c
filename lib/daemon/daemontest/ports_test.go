package daemontest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestFreeAddrsReservesPortsOutsideTheEphemeralRange: the addresses are
// distinct, bindable, below the kernel's ephemeral range (no ":0"
// listener or outgoing connection can be handed one), and reserved: no
// other caller gets one until the test that took it ends.
func TestFreeAddrsReservesPortsOutsideTheEphemeralRange(t *testing.T) {
	dir := filepath.Join(os.TempDir(), "meridian-test-ports")
	var ports []int
	t.Run("take", func(t *testing.T) {
		addrs := FreeAddrs(t, 20)
		seen := map[string]bool{}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s returned twice", a)
			}
			seen[a] = true
			_, p, err := net.SplitHostPort(a)
			if err != nil {
				t.Fatal(err)
			}
			port, _ := strconv.Atoi(p)
			if port < portFloor || port >= ephemeralLow() {
				t.Fatalf("port %d outside [%d, %d)", port, portFloor, ephemeralLow())
			}
			ports = append(ports, port)
			if _, ok := reserve(t, dir, port); ok {
				t.Fatalf("port %d reserved twice while its test runs", port)
			}
			l, err := net.Listen("tcp", a)
			if err != nil {
				t.Fatalf("reserved %s does not bind: %v", a, err)
			}
			l.Close()
		}
	})
	for _, port := range ports {
		if _, ok := reserve(t, dir, port); !ok {
			t.Fatalf("port %d still reserved after its test ended", port)
		}
	}
}
