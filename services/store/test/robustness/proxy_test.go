package robustness

import (
	"io"
	"net"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/netdelay"
)

// proxy is a fault-injecting TCP proxy in front of one member's raft
// listener. It can refuse everything (down) or connections from given
// source IPs (members dial from their own loopback IP); both also cut the
// connections already open. It delays each connection's bytes, each way,
// by what delay gives for its source IP (members of another region).
type proxy struct {
	lis    net.Listener
	target string
	delay  func(src string) time.Duration

	mu      sync.Mutex
	down    bool
	blocked map[string]bool
	conns   map[net.Conn]string // accepted conn → source IP
	peers   map[net.Conn]net.Conn
	wg      sync.WaitGroup
}

func newProxy(target string, delay func(src string) time.Duration) (*proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{lis: lis, target: target, delay: delay, blocked: map[string]bool{}, conns: map[net.Conn]string{}, peers: map[net.Conn]net.Conn{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		src := c.RemoteAddr().(*net.TCPAddr).IP.String()
		p.mu.Lock()
		refuse := p.down || p.blocked[src]
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c] = src
		p.peers[c] = up
		p.mu.Unlock()
		d := p.delay(src)
		pipe := func(dst, src net.Conn) {
			if d > 0 {
				netdelay.Copy(dst, src, d)
			} else {
				_, _ = io.Copy(dst, src)
			}
		}
		p.wg.Add(2)
		go func() { defer p.wg.Done(); pipe(up, c); p.drop(c) }()
		go func() { defer p.wg.Done(); pipe(c, up); p.drop(c) }()
	}
}

func (p *proxy) drop(c net.Conn) {
	p.mu.Lock()
	up := p.peers[c]
	delete(p.conns, c)
	delete(p.peers, c)
	p.mu.Unlock()
	_ = c.Close()
	if up != nil {
		_ = up.Close()
	}
}

// cut closes the open connections matching f.
func (p *proxy) cut(f func(src string) bool) {
	p.mu.Lock()
	var victims []net.Conn
	for c, src := range p.conns {
		if f(src) {
			victims = append(victims, c)
		}
	}
	p.mu.Unlock()
	for _, c := range victims {
		p.drop(c)
	}
}

func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	p.down = down
	p.mu.Unlock()
	if down {
		p.cut(func(string) bool { return true })
	}
}

func (p *proxy) block(ip string, on bool) {
	p.mu.Lock()
	p.blocked[ip] = on
	p.mu.Unlock()
	if on {
		p.cut(func(src string) bool { return src == ip })
	}
}

func (p *proxy) unblockAll() {
	p.mu.Lock()
	p.blocked = map[string]bool{}
	p.mu.Unlock()
}

func (p *proxy) close() {
	_ = p.lis.Close()
	p.cut(func(string) bool { return true })
	p.wg.Wait()
}
