package main

import (
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// TestAddressInUseNamesTheFlag: a member whose gRPC, raft or metrics
// address is taken (as a second member on one host with the first one's
// ports would find it) fails with an error naming the flag to set.
func TestAddressInUseNamesTheFlag(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, name := range []string{"listen", "peer-listen", "metrics-listen"} {
		t.Run(name, func(t *testing.T) {
			args := []string{"--data-dir", filepath.Join(t.TempDir(), "d"), "--listen", "127.0.0.1:0", "--metrics-listen", "", "--" + name, addr}
			f, err := parseFlags(args)
			if err != nil {
				t.Fatal(err)
			}
			err = run(t.Context(), f, slog.New(slog.NewTextHandler(io.Discard, nil)))
			want := "--" + name + " " + addr + " is in use (by another process, or another instance on this host): set --" + name + " to a free address"
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("--%s at a taken address: %v; want it to say %q", name, err, want)
			}
		})
	}
}
