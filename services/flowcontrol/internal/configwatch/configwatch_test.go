package configwatch

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/polltest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// seen records what the Sink was given last.
type seen struct {
	mu      sync.Mutex
	schemas map[string]int32 // name → matchingPrecedence
	levels  []string
	calls   int
}

func (s *seen) sink(schemas []*flowcontrolv1.FlowSchema, levels []*flowcontrolv1.PriorityLevelConfiguration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	s.schemas = map[string]int32{}
	for _, fs := range schemas {
		s.schemas[fs.Name] = fs.Spec.MatchingPrecedence
	}
	s.levels = nil
	for _, pl := range levels {
		s.levels = append(s.levels, pl.Name)
	}
	return nil
}

func (s *seen) precedence(name string) (int32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.schemas[name]
	return p, ok
}

// TestFollowsTheStore: the objects stored before the follower starts are
// handed over at once, then every create, update and delete, each within
// a bounded time.
func TestFollowsTheStore(t *testing.T) {
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	st, err := storeclient.Dial([]string{member.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	schemas := registry.FlowControl()[0]
	put := func(name string, precedence int32) {
		fs := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "u-" + "name"}, Spec: flowcontrolv1.FlowSchemaSpec{
			MatchingPrecedence: precedence, PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "x"},
		}}
		value, err := c.EncodeStorage(fs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.KV().Txn(t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
			RequestPut: &storev1.PutRequest{Key: []byte(schemas.Key("", name)), Value: value},
		}}}}); err != nil {
			t.Fatal(err)
		}
	}
	put("before", 100)
	// A key of another group is not the follower's.
	if _, err := st.KV().Txn(t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
		RequestPut: &storev1.PutRequest{Key: []byte("/registry/configmaps/default/x"), Value: []byte("not a flow schema")},
	}}}}); err != nil {
		t.Fatal(err)
	}

	var s seen
	f, err := New(Config{Store: st, Sink: s.sink, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	select {
	case <-f.Synced():
	case <-time.After(10 * time.Second):
		t.Fatal("not synced")
	}
	if p, ok := s.precedence("before"); !ok || p != 100 {
		t.Fatalf("the stored schema was not handed over: %v %v", p, ok)
	}
	put("after", 200)
	polltest.Until(t, 5*time.Second, "a new schema", func() bool { p, ok := s.precedence("after"); return ok && p == 200 })
	put("after", 300)
	polltest.Until(t, 5*time.Second, "a changed schema", func() bool { p, _ := s.precedence("after"); return p == 300 })
	if _, err := st.KV().Txn(t.Context(), &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestDeleteRange{
		RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(schemas.Key("", "before"))},
	}}}}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 5*time.Second, "a deleted schema", func() bool { _, ok := s.precedence("before"); return !ok })
}
