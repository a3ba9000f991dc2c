// Package storagetest gives the gateway's tests a storage.Store over a
// real store member running in process (services/store/storetest): raft,
// pebble and gRPC on loopback, its data in a temporary directory of the
// test.
package storagetest

import (
	"testing"

	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Start starts a single-member store and returns a Store over a plaintext
// connection to it. Both end when the test ends.
func Start(t testing.TB) *storage.Store {
	t.Helper()
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	conn, err := grpc.NewClient(member.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return storage.New(conn)
}
