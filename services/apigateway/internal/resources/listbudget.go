package resources

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

const (
	// DefaultListBytesInFlight is the default of Config.ListBytesInFlight.
	DefaultListBytesInFlight = 512 << 20
	// defaultListBudgetWait is the default of Config.ListBudgetWait:
	// kube-apiserver's request timeout, so that a relist storm of every
	// client at once is served in turn rather than refused.
	defaultListBudgetWait = time.Minute
	// listBudgetRetryAfter is the Retry-After, in seconds, of a list
	// refused because the budget stayed full.
	listBudgetRetryAfter = 1
	// listFixedBytes is the least a list is charged: what a list holds
	// in the process while in flight, whatever the bytes it sends — its
	// buffers: watchfanout's chunk buffer (1 MiB) and gzip compressor in
	// the all-in-one, gRPC's message buffers, the HTTP/2 writer's. A gzip
	// list of 10,000 ConfigMaps sends under 0.5 MiB and holds about
	// 2 MiB, so that charging the bytes sent alone would let several
	// times the budget be held.
	listFixedBytes = 2 << 20
	// maxListSizes bounds how many list shapes listBudget remembers the
	// size of; past it, it forgets them all and learns again.
	maxListSizes = 4096
)

// listBudget bounds the bytes of list responses in flight in the process,
// over every list and every caller (those flow control exempts too): a
// relist storm of hundreds of lists of the same large collection would
// otherwise hold one copy of the collection per list at once, in
// watchfanout's replies, gRPC's receive windows and the HTTP/2 writers.
//
// A list reserves its expected size (the size the last list of the same
// shape had: resource, namespace, encoding, limit; at least
// listFixedBytes) before it reads anything, waiting in arrival order
// while the reservation does not fit; what it sends beyond the
// reservation is charged as it is sent (never waiting, so that lists
// that have started always finish); all of it is released when the list
// ends. The bytes in flight are therefore at most
// the capacity plus what the running lists outgrew their reservations by.
// A list whose wait outlasts the bound is refused with 429 and Retry-After
// before anything is sent: never a truncated list.
//
// Invariant: used and the queue change under mu only; a waiter is either
// in the queue or granted (its ready channel closed), never both.
type listBudget struct {
	capacity int64
	wait     time.Duration

	mu    sync.Mutex
	used  int64
	queue []*listWaiter
	// sizes is the last size of each list shape.
	sizes map[string]int64
}

// listWaiter is a list waiting for its reservation.
type listWaiter struct {
	n     int64
	ready chan struct{}
}

// newListBudget returns a budget of capacity bytes (none when capacity < 0)
// whose lists wait at most wait for it.
func newListBudget(capacity int64, wait time.Duration) *listBudget {
	if capacity < 0 {
		return nil
	}
	return &listBudget{capacity: capacity, wait: wait, sizes: map[string]int64{}}
}

// listShape names lists expected to be of the same size.
func listShape(res *registry.Resource, req *apiv1.ListRequest, mediaType string) string {
	return res.GVR.String() + "|" + req.GetRef().GetNamespace() + "|" + mediaType + "|" +
		strconv.FormatInt(req.GetLimit(), 10) + "|" + req.GetLabelSelector() + "|" + req.GetFieldSelector()
}

// estimate is the reservation of a list of shape: its last size, or, for
// a shape not seen yet, a 32nd of the capacity (so that a storm of a shape
// not yet listed runs 32 lists at a time until the first ends); at least
// listFixedBytes.
func (b *listBudget) estimate(shape string) int64 {
	if n, ok := b.sizes[shape]; ok {
		return max(n, listFixedBytes)
	}
	return max(b.capacity/32, listFixedBytes)
}

// acquire reserves the expected size of a list of shape, waiting in
// arrival order while it does not fit; a reservation larger than the
// capacity waits for the budget to be empty. It returns the reservation,
// or a 429 TooManyRequests with Retry-After once it has waited b.wait,
// or ctx's error.
func (b *listBudget) acquire(ctx context.Context, shape string) (int64, error) {
	b.mu.Lock()
	n := min(b.estimate(shape), b.capacity)
	if len(b.queue) == 0 && b.used+n <= b.capacity {
		b.used += n
		b.mu.Unlock()
		return n, nil
	}
	w := &listWaiter{n: n, ready: make(chan struct{})}
	b.queue = append(b.queue, w)
	b.mu.Unlock()

	t := time.NewTimer(b.wait)
	defer t.Stop()
	var err error
	select {
	case <-w.ready:
		return n, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-t.C:
		err = apierrors.NewTooManyRequests(fmt.Sprintf("too many list responses in flight: waited %s for %d bytes of the list budget of %d", b.wait, n, b.capacity), listBudgetRetryAfter)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-w.ready:
		// Granted while giving up: hand the reservation back.
		b.used -= n
	default:
		for i, q := range b.queue {
			if q == w {
				b.queue = append(b.queue[:i], b.queue[i+1:]...)
				break
			}
		}
	}
	b.grant()
	return 0, err
}

// charge counts n more bytes in flight, without waiting.
func (b *listBudget) charge(n int64) {
	b.mu.Lock()
	b.used += n
	b.mu.Unlock()
}

// release returns n bytes in flight and records size as the size of lists
// of shape (size < 0: nothing to record, the list failed).
func (b *listBudget) release(n int64, shape string, size int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if size >= 0 {
		if len(b.sizes) >= maxListSizes {
			clear(b.sizes)
		}
		b.sizes[shape] = size
	}
	b.grant()
}

// grant wakes the waiters at the head of the queue whose reservations fit,
// in order. Called with mu held.
func (b *listBudget) grant() {
	for len(b.queue) > 0 {
		w := b.queue[0]
		if b.used+w.n > b.capacity && b.used > 0 {
			return
		}
		b.used += w.n
		b.queue = b.queue[1:]
		close(w.ready)
	}
}

// budgetedStream is a list's stream that charges what is sent beyond the
// list's reservation to the budget.
type budgetedStream struct {
	apiv1.ResourceService_ListServer
	b        *listBudget
	reserved int64
	sent     int64
}

// Send sends m, charging its bytes beyond the reservation.
func (s *budgetedStream) Send(m *httpbody.HttpBody) error {
	n := int64(len(m.GetData()))
	if over := s.sent + n - max(s.reserved, s.sent); over > 0 {
		s.b.charge(over)
	}
	s.sent += n
	return s.ResourceService_ListServer.Send(m)
}

// held is what the list holds of the budget: its reservation, or what it
// sent when that is more.
func (s *budgetedStream) held() int64 { return max(s.reserved, s.sent) }

// withListBudget runs list with stream charged to the budget (see
// listBudget), after waiting for its reservation, and reports it to the
// memory pacer (Config.MemoryPacer) as a burst bounded by the budget's
// capacity while it runs; with no budget, it runs list on stream.
func (s *Server) withListBudget(res *registry.Resource, req *apiv1.ListRequest, mediaType string, stream apiv1.ResourceService_ListServer, list func(apiv1.ResourceService_ListServer) error) error {
	b := s.listBudget
	if b == nil {
		return list(stream)
	}
	shape := listShape(res, req, mediaType)
	n, err := b.acquire(stream.Context(), shape)
	if err != nil {
		return err
	}
	bs := &budgetedStream{ResourceService_ListServer: stream, b: b, reserved: n}
	size := int64(-1)
	defer func() { b.release(bs.held(), shape, size) }()
	if p := s.cfg.MemoryPacer; p != nil {
		p.Begin(b.capacity)
		defer p.End()
	}
	if err := list(bs); err != nil {
		return err
	}
	size = bs.sent
	return nil
}

// shape is the part of a list's shape (listShape) its output decides.
func (o output) shape() string {
	return o.mediaType + "|" + strconv.FormatBool(o.table) + "|" + strconv.FormatBool(o.partial) + "|" + string(o.includeObject)
}
