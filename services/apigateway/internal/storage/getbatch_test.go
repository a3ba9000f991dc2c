package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// startStore runs a real single-member store and returns a Store over a
// connection that counts the store methods called.
func startStore(t *testing.T) (*Store, *sync.Map) {
	t.Helper()
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	calls := &sync.Map{}
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		n, _ := calls.LoadOrStore(method, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	return New(member.Dial(t, grpc.WithUnaryInterceptor(count))), calls
}

func calls(m *sync.Map, method string) int64 {
	n, ok := m.Load(method)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// TestConcurrentGetsAreBatchedAndLinearizable: 32 readers, each writing its
// own key and reading it back, and reading the others' keys. Every read
// sees its reader's last write (a read issued after a write returned sees
// it, batched or not), a missing key is ErrNotFound, and the reads went to
// the store in fewer calls than there were reads, some of them batches.
func TestConcurrentGetsAreBatchedAndLinearizable(t *testing.T) {
	s, m := startStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const readers, rounds = 32, 40
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("/registry/configmaps/ns/r%02d", r)
			rev, err := s.Create(ctx, key, []byte("0"), Parent{}, 0)
			if err != nil {
				errs <- err
				return
			}
			for i := 1; i <= rounds; i++ {
				if rev, err = s.Update(ctx, key, []byte(fmt.Sprint(i)), rev, 0); err != nil {
					errs <- err
					return
				}
				kv, readRev, err := s.Get(ctx, key, ReadOptions{})
				if err != nil || string(kv.Value) != fmt.Sprint(i) || kv.ModRevision != rev || readRev < rev {
					errs <- fmt.Errorf("reader %d round %d: read %q at mod %d (revision %d), %v; wrote %d at %d", r, i, kv.Value, kv.ModRevision, readRev, err, i, rev)
					return
				}
				other := fmt.Sprintf("/registry/configmaps/ns/r%02d", (r+i)%readers)
				if _, _, err := s.Get(ctx, other, ReadOptions{}); err != nil && !errors.Is(err, ErrNotFound) {
					errs <- err
					return
				}
				if _, _, err := s.Get(ctx, key+"-missing", ReadOptions{}); !errors.Is(err, ErrNotFound) {
					errs <- fmt.Errorf("missing key: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	gets := int64(readers * rounds * 3)
	ranges, txns := calls(m, storev1.KVService_Range_FullMethodName), calls(m, storev1.KVService_Txn_FullMethodName)
	batches := txns - readers*(rounds+1) // the writes are transactions too
	t.Logf("%d reads in %d ranges and %d batches", gets, ranges, batches)
	if batches <= 0 || ranges+batches >= gets {
		t.Fatalf("%d reads took %d ranges and %d batches: not batched", gets, ranges, batches)
	}
}

// TestBatchedGetGivesUpWithItsContext: a read waiting for a batch returns
// when its context ends, and the others in the batch still get their
// results.
func TestBatchedGetGivesUpWithItsContext(t *testing.T) {
	s, _ := startStore(t)
	ctx := context.Background()
	if _, err := s.Create(ctx, "/k", []byte("v"), Parent{}, 0); err != nil {
		t.Fatal(err)
	}
	// Hold the batcher busy, as a read in flight would.
	s.gets.mu.Lock()
	s.gets.busy = true
	s.gets.mu.Unlock()
	gone, cancel := context.WithCancel(ctx)
	results := make(chan error, 2)
	go func() { _, _, err := s.Get(gone, "/k", ReadOptions{}); results <- err }()
	go func() {
		kv, _, err := s.Get(ctx, "/k", ReadOptions{})
		if err == nil && string(kv.Value) != "v" {
			err = fmt.Errorf("read %q", kv.Value)
		}
		results <- err
	}()
	for {
		s.gets.mu.Lock()
		n := len(s.gets.waiting)
		s.gets.mu.Unlock()
		if n == 2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-results; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled read: %v", err)
	}
	s.gets.next() // the read in flight returns
	if err := <-results; err != nil {
		t.Fatalf("the other read: %v", err)
	}
}
