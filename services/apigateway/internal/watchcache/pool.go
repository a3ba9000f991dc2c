// Package watchcache picks a replica of the watch fan-out tier for each
// watch or cached read. Replicas are independent (each follows the store
// on its own), so any healthy one serves any request: calls go round-robin
// over the replicas whose connections are not failing, which moves a
// client's next watch to a healthy replica when one goes away.
package watchcache

import (
	"sync/atomic"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// Pool is a set of replica connections. It is safe for concurrent use.
type Pool struct {
	conns   []*grpc.ClientConn
	clients []watchv1.WatchServiceClient
	next    atomic.Uint64
}

// New returns a pool over conns, which must not be empty.
func New(conns []*grpc.ClientConn) *Pool {
	p := &Pool{conns: conns}
	for _, c := range conns {
		p.clients = append(p.clients, watchv1.NewWatchServiceClient(c))
	}
	return p
}

// Client returns the client of the next healthy replica — one whose
// connection is READY or IDLE (not yet used) — or, when none is, of the
// next replica. A replica that went away cycles between TRANSIENT_FAILURE
// and CONNECTING while gRPC retries it, and is skipped in both.
func (p *Pool) Client() watchv1.WatchServiceClient {
	n := len(p.conns)
	start := int(p.next.Add(1) % uint64(n))
	for i := 0; i < n; i++ {
		j := (start + i) % n
		switch p.conns[j].GetState() {
		case connectivity.Ready, connectivity.Idle:
			return p.clients[j]
		}
	}
	return p.clients[start]
}
