package ports_test

import (
	"net"
	"testing"

	"github.com/meridian-cp/meridian/lib/ports"
)

// TestDefaultsFitTogether: no two default listeners share a port, each is
// on loopback, and every address a binary dials by default is one a
// service listens on by default.
func TestDefaultsFitTogether(t *testing.T) {
	byPort := map[string]ports.Default{}
	listening := map[string]bool{}
	for _, d := range ports.Listeners() {
		host, port, err := net.SplitHostPort(d.Address)
		if err != nil {
			t.Errorf("%s %s: %v", d.Command, d.Flag, err)
			continue
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			t.Errorf("%s %s defaults to %s, not a loopback address", d.Command, d.Flag, d.Address)
		}
		if other, dup := byPort[port]; dup {
			t.Errorf("%s %s and %s %s both default to port %s", other.Command, other.Flag, d.Command, d.Flag, port)
		}
		byPort[port] = d
		listening[d.Address] = true
	}
	for _, d := range ports.Peers() {
		if !listening[d.Address] {
			t.Errorf("%s %s defaults to %s, where no service listens by default", d.Command, d.Flag, d.Address)
		}
	}
}
