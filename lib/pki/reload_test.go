package pki

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a time source the test steps by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// syncBuffer is a log destination safe for the handshakes' goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// rotation is a CA, a server's and a client's pair in files, each served
// by a reloader on a hand-stepped clock, and a TLS listener serving with
// the server's.
type rotation struct {
	t              *testing.T
	ca             *CA
	dir            string
	clock          *clock
	log            *syncBuffer
	server, client *KeyPairReloader
	lis            net.Listener
	// seen receives the serial number of the client certificate each
	// accepted handshake verified.
	seen chan string
}

var (
	serverSpec = CertSpec{CommonName: "server", DNSNames: []string{"localhost"}, Server: true}
	clientSpec = CertSpec{CommonName: "client", Organizations: []string{"o"}, Client: true}
)

func newRotation(t *testing.T) *rotation {
	t.Helper()
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	r := &rotation{t: t, ca: ca, dir: t.TempDir(), clock: &clock{now: time.Now()}, log: &syncBuffer{}, seen: make(chan string, 1)}
	r.write("server", serverSpec)
	r.write("client", clientSpec)
	opts := ReloadOptions{Logger: slog.New(slog.NewTextHandler(r.log, nil)), Now: r.clock.Now}
	if r.server, err = NewKeyPairReloader(r.file("server.crt"), r.file("server.key"), opts); err != nil {
		t.Fatal(err)
	}
	if r.client, err = NewKeyPairReloader(r.file("client.crt"), r.file("client.key"), opts); err != nil {
		t.Fatal(err)
	}
	if r.lis, err = tls.Listen("tcp", "127.0.0.1:0", ReloadingServerTLS(r.server, ca.Pool(), tls.RequireAndVerifyClientCert)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.lis.Close() })
	go func() {
		for {
			c, err := r.lis.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			serial := ""
			if tc.Handshake() == nil {
				serial = tc.ConnectionState().PeerCertificates[0].SerialNumber.String()
			}
			c.Close()
			r.seen <- serial
		}
	}()
	return r
}

func (r *rotation) file(name string) string { return filepath.Join(r.dir, name) }

// write issues a pair for spec and writes it as name.crt and name.key, by
// rename, as `meridian pki issue --renew` does; it returns the serial.
func (r *rotation) write(name string, spec CertSpec) string {
	r.t.Helper()
	kp, err := r.ca.IssueFiles(r.dir, name, spec)
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		r.t.Fatal(err)
	}
	return c.Leaf.SerialNumber.String()
}

// dial makes a new connection and returns the serial numbers of the
// server's certificate the client saw and of the client's the server saw.
func (r *rotation) dial() (server, client string) {
	r.t.Helper()
	c, err := tls.Dial("tcp", r.lis.Addr().String(), ReloadingClientTLS(r.client, r.ca.Pool(), "localhost"))
	if err != nil {
		r.t.Fatal(err)
	}
	server = c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	c.Close()
	return server, <-r.seen
}

func serialOf(t *testing.T, certFile string) string {
	t.Helper()
	data, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parseCertPEM(data)
	if err != nil {
		t.Fatal(err)
	}
	return c.SerialNumber.String()
}

// TestReloaderServesRotatedPair: a server and a client started with pair
// A present pair B on new connections once B's files replace A's and
// the check interval has passed, without being rebuilt; within the
// interval they keep A.
func TestReloaderServesRotatedPair(t *testing.T) {
	r := newRotation(t)
	serverA, clientA := serialOf(t, r.file("server.crt")), serialOf(t, r.file("client.crt"))
	if s, c := r.dial(); s != serverA || c != clientA {
		t.Fatalf("before rotation: server %s client %s, want %s %s", s, c, serverA, clientA)
	}

	serverB, clientB := r.write("server", serverSpec), r.write("client", clientSpec)
	r.clock.step(DefaultReloadInterval - time.Millisecond)
	if s, c := r.dial(); s != serverA || c != clientA {
		t.Fatalf("files read again within the interval: server %s client %s", s, c)
	}
	r.clock.step(time.Millisecond)
	if s, c := r.dial(); s != serverB || c != clientB {
		t.Fatalf("after rotation: server %s client %s, want %s %s", s, c, serverB, clientB)
	}
	if n := strings.Count(r.log.String(), "certificate reloaded"); n != 2 {
		t.Fatalf("%d reloads logged, want 2:\n%s", n, r.log)
	}
}

// TestReloaderKeepsPairOnBadFiles: a key that does not match the
// certificate, a truncated key or a missing file leave the server
// serving the pair it had; each is logged once, with the files' names
// and without a byte of any key; a good pair written afterwards is
// served.
func TestReloaderKeepsPairOnBadFiles(t *testing.T) {
	r := newRotation(t)
	serverA := serialOf(t, r.file("server.crt"))
	goodKey, err := os.ReadFile(r.file("server.key"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := r.ca.Issue(serverSpec)
	if err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{goodKey, other.KeyPEM}

	for _, bad := range []struct {
		name  string
		write func()
	}{
		{"mismatched key", func() { writeTestFile(t, r.file("server.key"), other.KeyPEM) }},
		{"truncated key", func() { writeTestFile(t, r.file("server.key"), other.KeyPEM[:len(other.KeyPEM)/2]) }},
		{"missing certificate", func() {
			if err := os.Remove(r.file("server.crt")); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		before := strings.Count(r.log.String(), "level=ERROR")
		bad.write()
		for range 2 {
			r.clock.step(DefaultReloadInterval)
			if s, _ := r.dial(); s != serverA {
				t.Fatalf("%s: server presented %s, want the old %s", bad.name, s, serverA)
			}
		}
		if n := strings.Count(r.log.String(), "level=ERROR") - before; n != 1 {
			t.Fatalf("%s: %d errors logged over two checks, want 1:\n%s", bad.name, n, r.log)
		}
	}
	log := r.log.String()
	if !strings.Contains(log, r.file("server.key")) || !strings.Contains(log, r.file("server.crt")) {
		t.Fatalf("log does not name the files:\n%s", log)
	}
	for _, key := range keys {
		for _, line := range strings.Split(string(key), "\n") {
			if len(line) >= 16 && !strings.HasPrefix(line, "-----") && strings.Contains(log, line[:16]) {
				t.Fatalf("log holds key material %q:\n%s", line[:16], log)
			}
		}
	}

	serverC := r.write("server", serverSpec)
	r.clock.step(DefaultReloadInterval)
	if s, _ := r.dial(); s != serverC {
		t.Fatalf("after a good pair: server %s, want %s", s, serverC)
	}
}

func TestNewKeyPairReloaderNeedsAPair(t *testing.T) {
	dir := t.TempDir()
	if _, err := NewKeyPairReloader(filepath.Join(dir, "x.crt"), filepath.Join(dir, "x.key"), ReloadOptions{}); err == nil {
		t.Fatal("reloader without files")
	}
	ca, err := NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueFiles(dir, "x", serverSpec)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Issue(serverSpec)
	if err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, kp.KeyFile, other.KeyPEM)
	if _, err := NewKeyPairReloader(kp.CertFile, kp.KeyFile, ReloadOptions{}); err == nil {
		t.Fatal("reloader with a mismatched pair")
	}
}

// writeTestFile replaces name by rename, as a rotation does.
func writeTestFile(t *testing.T, name string, data []byte) {
	t.Helper()
	if err := writeFile(name, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
