package netdelay

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestDelaysEachWayInOrder echoes messages through a proxy: each round
// trip takes at least twice the delay, and every byte comes back in
// order.
func TestDelaysEachWayInOrder(t *testing.T) {
	const delay = 10 * time.Millisecond
	p := Start(t, "127.0.0.1:0", Echo(t), delay)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 5 {
		msg := bytes.Repeat([]byte{byte('a' + i)}, 1000*(i+1))
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 2*delay {
			t.Errorf("round trip %d took %s, under twice the delay %s", i, rtt, delay)
		}
		if !bytes.Equal(got, msg) {
			t.Errorf("round trip %d: the bytes came back changed", i)
		}
	}
}
