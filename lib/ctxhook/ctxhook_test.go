package ctxhook

import (
	"context"
	"sync"
	"testing"
	"time"
)

// hooked is a context with a hook, as a server's request context offers
// one (Key): it runs its hook when ended by end.
type hooked struct {
	context.Context
	cancel context.CancelFunc

	mu    sync.Mutex
	hook  func()
	ended bool
}

func newHooked(parent context.Context) *hooked {
	ctx, cancel := context.WithCancel(parent)
	return &hooked{Context: ctx, cancel: cancel}
}

func (h *hooked) Value(key any) any {
	if _, ok := key.(Key); ok {
		return h
	}
	return h.Context.Value(key)
}

func (h *hooked) Hook(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hook != nil || h.ended {
		return false
	}
	h.hook = f
	return true
}

func (h *hooked) Unhook() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := h.hook != nil
	h.hook = nil
	return ok
}

func (h *hooked) end() {
	h.cancel()
	h.mu.Lock()
	f := h.hook
	h.hook, h.ended = nil, true
	h.mu.Unlock()
	if f != nil {
		go f()
	}
}

func (h *hooked) holds() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hook != nil
}

// waitRan waits for ran to close, failing the test after a while.
func waitRan(t *testing.T, ran chan struct{}, what string) {
	t.Helper()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not run", what)
	}
}

// TestAfterFuncUsesTheHook: under value contexts, AfterFunc takes the
// request context's hook, which runs f at the context's end; Stop
// removes it.
func TestAfterFuncUsesTheHook(t *testing.T) {
	h := newHooked(t.Context())
	ctx := context.WithValue(h, struct{}{}, 1)
	ran := make(chan struct{})
	AfterFunc(ctx, func() { close(ran) })
	if !h.holds() {
		t.Fatal("AfterFunc did not take the context's hook")
	}
	h.end()
	waitRan(t, ran, "f")

	h2 := newHooked(t.Context())
	s := AfterFunc(h2, func() { t.Error("a stopped f ran") })
	if !s.Stop() || h2.holds() {
		t.Fatal("Stop did not remove the hook")
	}
	if s.Stop() {
		t.Error("a second Stop reported true")
	}
	h2.end()
}

// TestAfterFuncFallsBack: where the hook would not see the end (a context
// that ends on its own lies between), or is taken, AfterFunc is
// context.AfterFunc's.
func TestAfterFuncFallsBack(t *testing.T) {
	h := newHooked(t.Context())
	child, cancel := context.WithCancel(h)
	ran := make(chan struct{})
	AfterFunc(child, func() { close(ran) })
	if h.holds() {
		t.Fatal("AfterFunc took the hook of a context above a context.WithCancel")
	}
	cancel()
	waitRan(t, ran, "f under a cancelled child")

	h2 := newHooked(t.Context())
	AfterFunc(h2, func() {})
	second := make(chan struct{})
	s := AfterFunc(h2, func() { close(second) })
	h2.end()
	waitRan(t, second, "the second f, the hook taken")
	if s.Stop() {
		t.Error("Stop after f ran reported true")
	}
}
