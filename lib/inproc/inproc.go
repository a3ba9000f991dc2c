// Package inproc connects gRPC clients to gRPC servers of the same
// process over in-memory connections, without TLS, while each server
// still learns who calls it as it would from an mTLS client certificate.
//
// A Network holds named Listeners. Code of the process dials one with
// DialOptions(cert): the server's end of every such connection carries
// cert, chosen by the dialing code, never by the peer. ServerCredentials
// wraps a server's TLS credentials: a connection from a Listener skips
// the TLS handshake and its AuthInfo is an AuthInfo holding that
// certificate (identity.VerifiedPeer reads it as it reads a verified TLS
// chain); every other connection (TCP) goes through TLS as before.
//
// This is safe because an in-memory connection never leaves the process:
// only code linked into it can create one, and it can already read every
// key and certificate the process holds.
package inproc

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Network is the network of in-memory connections.
const Network = "inproc"

// Addr is the address of an end of an in-memory connection: the name of
// a Listener, or of a dialer.
type Addr string

// Network returns "inproc".
func (Addr) Network() string { return Network }

// String returns the name.
func (a Addr) String() string { return string(a) }

// AuthInfo is the gRPC AuthInfo of an in-memory connection.
type AuthInfo struct {
	credentials.CommonAuthInfo
	// Cert is the certificate the dialing code of this process gave the
	// connection: the identity the server's end acts on, as if the
	// caller had presented it in a verified mTLS handshake. Nil on the
	// client's end.
	Cert *x509.Certificate
}

// AuthType returns "inproc".
func (AuthInfo) AuthType() string { return Network }

// Listeners are the in-memory listeners of a process, by name. The zero
// value is ready to use.
type Listeners struct {
	mu     sync.Mutex
	byName map[string]*Listener
	// chunks are the buffers of every connection's pipes (see pipe).
	chunks sync.Pool
}

// Listen returns a new listener named name; the name must be free.
func (ls *Listeners) Listen(name string) (*Listener, error) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if _, ok := ls.byName[name]; ok {
		return nil, fmt.Errorf("inproc: listener %q exists", name)
	}
	if ls.byName == nil {
		ls.byName = map[string]*Listener{}
	}
	l := &Listener{name: Addr(name), conns: make(chan *conn), done: make(chan struct{}), chunks: &ls.chunks}
	ls.byName[name] = l
	return l, nil
}

// Target returns the gRPC target (for grpc.NewClient) of the listener
// named name, to dial with DialOptions.
func Target(name string) string { return "passthrough:///" + name }

// DialOptions are the options with which grpc.NewClient reaches, over
// in-memory connections without TLS, the listener a Target names. cert is
// the identity the servers see for the caller (AuthInfo.Cert). Given
// after other transport credentials, they replace them.
func (ls *Listeners) DialOptions(cert *x509.Certificate) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(clientCredentials{}),
		grpc.WithContextDialer(func(ctx context.Context, name string) (net.Conn, error) {
			ls.mu.Lock()
			l := ls.byName[name]
			ls.mu.Unlock()
			if l == nil {
				return nil, fmt.Errorf("inproc: no listener %q", name)
			}
			return l.dial(ctx, cert)
		}),
	}
}

// Listener is a net.Listener of in-memory connections.
type Listener struct {
	name   Addr
	chunks *sync.Pool // the Listeners' chunks
	conns  chan *conn
	done   chan struct{}
	once   sync.Once
}

// Accept waits for the next connection; after Close it fails with
// net.ErrClosed.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; connections made stay open.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr returns the listener's name.
func (l *Listener) Addr() net.Addr { return l.name }

// dial returns the client's end of a new connection whose server's end
// carries cert, once the listener accepted it.
func (l *Listener) dial(ctx context.Context, cert *x509.Certificate) (net.Conn, error) {
	client, server := newConn(l.chunks, Addr("client-of-"+string(l.name)), l.name, &AuthInfo{
		// In memory, nobody can read or change the bytes.
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		Cert:           cert,
	})
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, fmt.Errorf("inproc: dial %s: %w", l.name, net.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("inproc: dial %s: %w", l.name, ctx.Err())
	}
}

// errNotInproc refuses a connection that is not in memory where only one
// is expected.
var errNotInproc = errors.New("inproc: not an in-memory connection")

// ServerCredentials returns transport credentials that accept in-memory
// connections from a Listener without a handshake (their AuthInfo is the
// dialer's AuthInfo) and hand every other connection to tls.
func ServerCredentials(tls credentials.TransportCredentials) credentials.TransportCredentials {
	return serverCredentials{TransportCredentials: tls}
}

type serverCredentials struct {
	credentials.TransportCredentials
}

// ServerHandshake: the concrete type of rawConn says where it came from;
// only a Listener of this process makes a *conn.
func (s serverCredentials) ServerHandshake(rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c, ok := rawConn.(*conn); ok && c.identity != nil {
		return c, *c.identity, nil
	}
	return s.TransportCredentials.ServerHandshake(rawConn)
}

func (s serverCredentials) Clone() credentials.TransportCredentials {
	return serverCredentials{TransportCredentials: s.TransportCredentials.Clone()}
}

// clientCredentials are the client side of in-memory connections: no
// handshake.
type clientCredentials struct{}

func (clientCredentials) ClientHandshake(_ context.Context, _ string, rawConn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if c, ok := rawConn.(*conn); ok && c.identity == nil {
		return c, AuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return nil, nil, errNotInproc
}

func (clientCredentials) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errNotInproc
}

func (clientCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: Network}
}

func (c clientCredentials) Clone() credentials.TransportCredentials { return c }

// OverrideServerName is deprecated in gRPC and unused.
func (clientCredentials) OverrideServerName(string) error { return nil }
