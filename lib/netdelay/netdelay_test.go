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

// TestNearPassesUndelayed: through a proxy with 3 s of delay each way, a
// connection from a near host echoes within 2 s, one from elsewhere does
// not within 1 s.
func TestNearPassesUndelayed(t *testing.T) {
	p := Start(t, "127.0.0.1:0", Echo(t), 3*time.Second)
	p.Near("127.0.0.2")
	echoes := func(from string, within time.Duration) bool {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
		c, err := d.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(within))
		got := make([]byte, 4)
		_, err = io.ReadFull(c, got)
		return err == nil && string(got) == "ping"
	}
	if !echoes("127.0.0.2", 2*time.Second) {
		t.Error("a connection from the near host 127.0.0.2 did not echo within 2 s: it was delayed")
	}
	if echoes("127.0.0.1", time.Second) {
		t.Error("a connection from 127.0.0.1, not near, echoed within 1 s through 3 s of delay each way")
	}
}
