package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/memtrim"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// heldStream is a list's stream whose Send blocks until release is
// closed, as a client that does not read: the list holds its share of
// the budget meanwhile. sending is closed at the first Send.
type heldStream struct {
	listStream
	sending, release chan struct{}
}

func (h *heldStream) Send(b *httpbody.HttpBody) error {
	select {
	case <-h.sending:
	default:
		close(h.sending)
	}
	<-h.release
	return h.listStream.Send(b)
}

// budgetEnv is a Server whose list budget holds one list of the 40
// ConfigMaps of namespace "budget" (about 45 KiB of JSON) but not two, and
// the body of that list from a first, unhindered list.
func budgetEnv(t *testing.T, wait time.Duration) (*env, []byte) {
	return budgetEnvWith(t, Config{ListBytesInFlight: 64 << 10, ListBudgetWait: wait})
}

// budgetEnvWith is budgetEnv's Server with cfg, and namespace "budget" with
// its 40 ConfigMaps.
func budgetEnvWith(t *testing.T, cfg Config) (*env, []byte) {
	e := newEnv(t, cfg)
	e.namespace("budget")
	for i := range 40 {
		e.mustCreate(configMap("budget", ""), fmt.Sprintf(`{"metadata":{"name":"cm-%02d"},"data":{"v":%q}}`, i, strings.Repeat("x", 1000)))
	}
	// The budget learns the list's size from this one.
	first := &listStream{ctx: t.Context()}
	if err := e.s.List(budgetList(), first); err != nil {
		t.Fatal(err)
	}
	body := first.body()
	if n := len(body); n < 33<<10 || n > 63<<10 || n >= listFixedBytes {
		t.Fatalf("the list is %d bytes; the test wants one list to fit the budget and two not to", n)
	}
	return e, body
}

func budgetList() *apiv1.ListRequest {
	return &apiv1.ListRequest{Ref: configMap("budget", ""), Accept: negotiation.JSON}
}

// startHeld starts a list that holds its budget until release is closed,
// and waits until it does; the returned channel has its error.
func startHeld(t *testing.T, e *env) (*heldStream, chan error) {
	held := &heldStream{listStream: listStream{ctx: t.Context()}, sending: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- e.s.List(budgetList(), held) }()
	select {
	case <-held.sending:
	case err := <-done:
		t.Fatalf("the held list ended: %v", err)
	}
	return held, done
}

// checkWholeList checks that body is the whole list of namespace budget,
// byte for byte the unhindered list (no write happens in between).
func checkWholeList(t *testing.T, body, want []byte) {
	t.Helper()
	var l corev1.ConfigMapList
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatalf("the list does not parse: %v", err)
	}
	if len(l.Items) != 40 || l.Items[39].Name != "cm-39" {
		t.Fatalf("the list has %d items", len(l.Items))
	}
	if !bytes.Equal(body, want) {
		t.Errorf("the list differs from the unhindered one:\n%s\nwant\n%s", body, want)
	}
}

// TestListBudgetFullIs429 checks that a list that finds the list budget
// full for longer than the wait bound gets 429 TooManyRequests with
// Retry-After and nothing else, while the list holding the budget still
// completes whole.
func TestListBudgetFullIs429(t *testing.T) {
	e, want := budgetEnv(t, 100*time.Millisecond)
	held, done := startHeld(t, e)

	refused := &listStream{ctx: t.Context()}
	err := e.s.List(budgetList(), refused)
	st := statusOf(err)
	if st.Code != http.StatusTooManyRequests || st.Reason != metav1.StatusReasonTooManyRequests || st.Details == nil || st.Details.RetryAfterSeconds < 1 {
		t.Fatalf("a list over the budget got %d %s (details %+v), want 429 TooManyRequests with Retry-After", st.Code, st.Reason, st.Details)
	}
	if len(refused.sent) != 0 {
		t.Fatalf("the refused list sent %q", refused.body())
	}

	close(held.release)
	if err := <-done; err != nil {
		t.Fatalf("the held list: %v", err)
	}
	checkWholeList(t, held.body(), want)

	// With the budget free again, the next list is served.
	after := &listStream{ctx: t.Context()}
	if err := e.s.List(budgetList(), after); err != nil {
		t.Fatalf("a list after the budget freed up: %v", err)
	}
	checkWholeList(t, after.body(), want)
}

// TestListBudgetWaitingListCompletes checks that a list that finds the
// budget full waits for it and then is served whole.
func TestListBudgetWaitingListCompletes(t *testing.T) {
	e, want := budgetEnv(t, time.Minute)
	held, done := startHeld(t, e)

	waiting := &listStream{ctx: t.Context()}
	waited := make(chan error, 1)
	go func() { waited <- e.s.List(budgetList(), waiting) }()
	// The list queues for the budget: nothing is sent meanwhile.
	for queued := false; !queued; {
		e.s.listBudget.mu.Lock()
		queued = len(e.s.listBudget.queue) == 1
		e.s.listBudget.mu.Unlock()
		select {
		case err := <-waited:
			t.Fatalf("the second list ended while the budget was full: %v", err)
		case <-time.After(time.Millisecond):
		}
	}

	close(held.release)
	if err := <-done; err != nil {
		t.Fatalf("the held list: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("the waiting list: %v", err)
	}
	checkWholeList(t, held.body(), want)
	checkWholeList(t, waiting.body(), want)
}

// TestListBudgetCancelledWaiter checks that a list whose client goes away
// while it waits leaves the queue, and the budget serves the next list.
func TestListBudgetCancelledWaiter(t *testing.T) {
	e, want := budgetEnv(t, time.Minute)
	held, done := startHeld(t, e)

	ctx, cancel := context.WithCancel(t.Context())
	gone := make(chan error, 1)
	go func() { gone <- e.s.List(budgetList(), &listStream{ctx: ctx}) }()
	for queued := false; !queued; time.Sleep(time.Millisecond) {
		e.s.listBudget.mu.Lock()
		queued = len(e.s.listBudget.queue) == 1
		e.s.listBudget.mu.Unlock()
	}
	cancel()
	if err := <-gone; err == nil {
		t.Fatal("a list whose client went away while it waited succeeded")
	}

	close(held.release)
	if err := <-done; err != nil {
		t.Fatalf("the held list: %v", err)
	}
	next := &listStream{ctx: t.Context()}
	if err := e.s.List(budgetList(), next); err != nil {
		t.Fatalf("the next list: %v", err)
	}
	checkWholeList(t, next.body(), want)
	e.s.listBudget.mu.Lock()
	defer e.s.listBudget.mu.Unlock()
	if e.s.listBudget.used != 0 || len(e.s.listBudget.queue) != 0 {
		t.Fatalf("after every list ended the budget holds %d bytes and %d waiters", e.s.listBudget.used, len(e.s.listBudget.queue))
	}
}

// TestListBudgetChargesFixedBytes checks that a list is charged at least
// what any list holds in flight (listFixedBytes), however few bytes it
// sends: with a budget of two lists' fixed bytes, two small lists hold it
// and a third waits, then gets 429.
func TestListBudgetChargesFixedBytes(t *testing.T) {
	e, want := budgetEnvWith(t, Config{ListBytesInFlight: 2 * listFixedBytes, ListBudgetWait: 100 * time.Millisecond})
	held1, done1 := startHeld(t, e)
	held2, done2 := startHeld(t, e)

	refused := &listStream{ctx: t.Context()}
	if st := statusOf(e.s.List(budgetList(), refused)); st.Code != http.StatusTooManyRequests {
		t.Fatalf("a third list of %d bytes with two held and a budget of %d got %d %s, want 429", len(want), 2*listFixedBytes, st.Code, st.Reason)
	}
	close(held1.release)
	close(held2.release)
	for _, done := range []chan error{done1, done2} {
		if err := <-done; err != nil {
			t.Fatalf("a held list: %v", err)
		}
	}
	checkWholeList(t, held1.body(), want)
	checkWholeList(t, held2.body(), want)
}

// TestListBudgetPacesGC checks the process's memory policy while lists are
// in flight: with a memory pacer, Go's soft memory limit is set below none
// (and above the budget) while a list holds the budget, stays set while
// another runs, and is restored once the last ends.
func TestListBudgetPacesGC(t *testing.T) {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	if orig != math.MaxInt64 {
		t.Skipf("GOMEMLIMIT sets a limit (%d): the test wants none", orig)
	}
	const budget = 256 << 20
	e, want := budgetEnvWith(t, Config{ListBytesInFlight: budget, MemoryPacer: memtrim.NewPacer()})
	if got := debug.SetMemoryLimit(-1); got != orig {
		t.Fatalf("after the first list ended the memory limit is %d, want %d", got, orig)
	}

	held1, done1 := startHeld(t, e)
	during := debug.SetMemoryLimit(-1)
	if during == orig || during < budget {
		t.Fatalf("with a list in flight the memory limit is %d, want one above the budget (%d) and below none", during, budget)
	}
	held2, done2 := startHeld(t, e)
	close(held1.release)
	if err := <-done1; err != nil {
		t.Fatalf("the first held list: %v", err)
	}
	if got := debug.SetMemoryLimit(-1); got != during {
		t.Fatalf("with the second list still in flight the memory limit is %d, want %d", got, during)
	}
	close(held2.release)
	if err := <-done2; err != nil {
		t.Fatalf("the second held list: %v", err)
	}
	if got := debug.SetMemoryLimit(-1); got != orig {
		t.Fatalf("after the last list ended the memory limit is %d, want %d", got, orig)
	}
	checkWholeList(t, held1.body(), want)
	checkWholeList(t, held2.body(), want)
}
