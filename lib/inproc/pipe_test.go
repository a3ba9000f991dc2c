package inproc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// TestConn: bytes cross in both directions at once, in order, without a
// reader waiting (writes never block); a read deadline ends a waiting
// read; Close ends the peer's reads with io.EOF after the buffered bytes
// and fails writes.
func TestConn(t *testing.T) {
	a, b := newConn(&sync.Pool{}, "a", "b", nil)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, w := range []net.Conn{a, b} {
		if n, err := w.Write(big); err != nil || n != len(big) {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	for _, r := range []net.Conn{a, b} {
		got := make([]byte, len(big))
		if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, big) {
			t.Fatalf("read back %d bytes, %v: not what was written", len(got), err)
		}
	}

	if err := a.SetReadDeadline(time.Now().Add(10 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want ErrDeadlineExceeded", err)
	}
	if err := a.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	if _, err := b.Write([]byte("last")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(a); err != nil || string(got) != "last" {
		t.Fatalf("after the peer closed: %q, %v; want last then EOF", got, err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write to a closed peer: %v, want ErrClosed", err)
	}
	if a.LocalAddr().String() != "a" || a.RemoteAddr().Network() != Network {
		t.Errorf("addresses %v %v", a.LocalAddr(), a.RemoteAddr())
	}
}

// TestListenerClose: after Close, Accept and dials fail with
// net.ErrClosed.
func TestListenerClose(t *testing.T) {
	var ls Listeners
	l, err := ls.Listen("x")
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if _, err := l.dial(t.Context(), nil); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("dial after Close: %v", err)
	}
}
