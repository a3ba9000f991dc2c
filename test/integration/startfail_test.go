package integration

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
)

// TestStartFailsCleanlyWhenThePortIsTaken: when the gRPC API's address is
// taken, Start returns the error after the HTTPS API is already serving;
// the goroutines it started are stopped by its cleanup, not left reading
// a nil control plane (a nil dereference would crash the process instead
// of returning the error).
func TestStartFailsCleanlyWhenThePortIsTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cp, err := allinone.Start(ctx, allinone.Config{
		DataDir: t.TempDir(), Listen: "127.0.0.1:0", GRPCListen: taken.Addr().String(),
		Logger: slog.New(slog.DiscardHandler),
	})
	if err == nil {
		cp.Close()
		t.Fatal("Start succeeded on a taken gRPC address")
	}
	if cp != nil || !strings.Contains(err.Error(), "grpc listen") {
		t.Fatalf("Start: %v, %v; want no control plane and the listen error", cp, err)
	}
	// The goroutines it started have had time to run into a nil control
	// plane, had they kept one.
	time.Sleep(500 * time.Millisecond)
}
