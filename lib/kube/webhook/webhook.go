// Package webhook is meridian's one HTTPS client of the webhooks users
// configure: admission webhooks (Validating- and
// MutatingWebhookConfiguration) and CRD conversion webhooks. It calls a
// webhook as kube-apiserver does:
//
//   - the address is a ClientConfig's URL, or its Service reference,
//     which resolves as https://<name>.<namespace>.svc:<port><path>
//     through the DNS of the cluster meridian runs in (the TLS server
//     name is <name>.<namespace>.svc);
//   - the server certificate is verified against the ClientConfig's
//     caBundle, or the system roots when it has none;
//   - every call has a timeout (the webhook's timeoutSeconds), sent as
//     ?timeout=<n>s as kube-apiserver does; a slow or dead webhook costs
//     the caller at most that timeout;
//   - the response body is bounded (MaxResponseBytes) and must be 200.
//
// Nothing of a request or response body is logged; errors name the
// webhook's address without its query.
package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// DefaultTimeout is a call's timeout when none is given: Kubernetes'
// default timeoutSeconds (10) for admission and conversion webhooks.
const DefaultTimeout = 10 * time.Second

// MaxTimeout is the longest timeout a call may have (timeoutSeconds is
// at most 30 in Kubernetes).
const MaxTimeout = 30 * time.Second

// DefaultMaxResponseBytes bounds a webhook's response body when
// Options.MaxResponseBytes is 0: 3 MiB, kube-apiserver's limit on a
// request body to it (twice the largest stored object, plus room).
const DefaultMaxResponseBytes = 3 << 20

// ServiceReference names an in-cluster Service serving a webhook.
type ServiceReference struct {
	// Namespace and Name of the Service.
	Namespace, Name string
	// Path is the URL path; empty means "/".
	Path string
	// Port is the Service port; 0 means 443.
	Port int32
}

// ClientConfig is how to reach a webhook: exactly one of URL and
// Service, as Kubernetes' WebhookClientConfig.
type ClientConfig struct {
	// URL is an https URL without user info or fragment.
	URL string
	// Service is an in-cluster Service; nil when URL is set.
	Service *ServiceReference
	// CABundle is the PEM bundle verifying the webhook's certificate;
	// empty means the system roots.
	CABundle []byte
}

// Options configures a Client. The zero value is usable.
type Options struct {
	// MaxResponseBytes bounds a response body; 0 means
	// DefaultMaxResponseBytes.
	MaxResponseBytes int64
	// DialContext dials the webhook's address (host:port); nil means a
	// net.Dialer's, which resolves names through the system's DNS (in a
	// cluster, <svc>.<ns>.svc resolves through its DNS).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Client calls webhooks. It keeps one HTTP transport (and its idle
// connections) per CA bundle. It is safe for concurrent use.
type Client struct {
	opts Options

	mu struct {
		sync.Mutex
		// transports by the SHA-256 of the CA bundle.
		transports map[[32]byte]*http.Transport
	}
}

// New returns a Client.
func New(opts Options) *Client {
	if opts.MaxResponseBytes <= 0 {
		opts.MaxResponseBytes = DefaultMaxResponseBytes
	}
	c := &Client{opts: opts}
	c.mu.transports = map[[32]byte]*http.Transport{}
	return c
}

// Close drops the idle connections of every transport.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range c.mu.transports {
		t.CloseIdleConnections()
	}
}

// Error is a failed call. Timeout reports whether it ran out of time.
type Error struct {
	// Address is the webhook's URL without its query.
	Address string
	// Timeout is true when the call did not finish within its timeout.
	Timeout bool
	// StatusCode is the webhook's HTTP status when it answered one other
	// than 200; 0 otherwise.
	StatusCode int
	// Err is the cause.
	Err error
}

func (e *Error) Error() string {
	return fmt.Sprintf("failed to call webhook: Post %q: %v", e.Address, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrTooLarge is the cause of an Error whose response exceeded
// MaxResponseBytes.
var ErrTooLarge = errors.New("webhook response too large")

// ErrTimeout is the cause of an Error that ran out of time.
var ErrTimeout = errors.New("context deadline exceeded")

// Address returns the URL cfg calls; its host is the TLS server name
// verified.
func Address(cfg ClientConfig) (*url.URL, error) {
	switch {
	case cfg.URL != "" && cfg.Service != nil:
		return nil, errors.New("webhook: exactly one of url and service is allowed")
	case cfg.Service != nil:
		svc := cfg.Service
		if svc.Name == "" || svc.Namespace == "" {
			return nil, errors.New("webhook: service needs a name and a namespace")
		}
		port := svc.Port
		if port == 0 {
			port = 443
		}
		host := svc.Name + "." + svc.Namespace + ".svc"
		path := svc.Path
		if path == "" {
			path = "/"
		}
		return &url.URL{Scheme: "https", Host: net.JoinHostPort(host, strconv.Itoa(int(port))), Path: path}, nil
	case cfg.URL != "":
		u, err := url.Parse(cfg.URL)
		if err != nil {
			// url.Parse's error repeats the URL, which may hold a password.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, fmt.Errorf("webhook: url: %w", err)
		}
		if u.Scheme != "https" {
			return nil, fmt.Errorf("webhook: url scheme must be https, got %q", u.Scheme)
		}
		if u.User != nil {
			return nil, errors.New("webhook: url must not contain user information")
		}
		if u.Fragment != "" || u.RawFragment != "" {
			return nil, errors.New("webhook: url must not contain a fragment")
		}
		if u.Host == "" {
			return nil, errors.New("webhook: url needs a host")
		}
		return u, nil
	default:
		return nil, errors.New("webhook: one of url and service is required")
	}
}

// Post sends body (JSON) to the webhook cfg names and returns the
// response body. timeout bounds the whole call (0: DefaultTimeout, at
// most MaxTimeout); so does ctx. Errors are *Error, except for a cfg
// that names no valid address.
func (c *Client) Post(ctx context.Context, cfg ClientConfig, timeout time.Duration, body []byte) ([]byte, error) {
	u, err := Address(cfg)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	timeout = min(timeout, MaxTimeout)
	rt, err := c.transport(cfg.CABundle)
	if err != nil {
		return nil, err
	}
	addr := (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
	// kube-apiserver tells the webhook its timeout, in whole seconds.
	q := u.Query()
	q.Set("timeout", strconv.Itoa(int((timeout+time.Second-1)/time.Second))+"s")
	target := *u
	target.RawQuery = q.Encode()

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), bytes.NewReader(body))
	if err != nil {
		return nil, &Error{Address: addr, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return nil, c.failure(ctx, addr, 0, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, c.opts.MaxResponseBytes+1))
	if err != nil {
		return nil, c.failure(ctx, addr, 0, err)
	}
	if int64(len(data)) > c.opts.MaxResponseBytes {
		return nil, &Error{Address: addr, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, c.opts.MaxResponseBytes)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &Error{Address: addr, StatusCode: resp.StatusCode, Err: fmt.Errorf("the server responded with %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))}
	}
	return data, nil
}

// failure is the Error of a call that failed in transport.
func (c *Client) failure(ctx context.Context, addr string, code int, err error) *Error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Address: addr, Timeout: true, StatusCode: code, Err: ErrTimeout}
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the url.Error repeats the URL, with its query
	}
	return &Error{Address: addr, StatusCode: code, Err: err}
}

// transport returns the transport verifying against caBundle.
func (c *Client) transport(caBundle []byte) (*http.Transport, error) {
	key := sha256.Sum256(caBundle)
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.mu.transports[key]; ok {
		return t, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if len(caBundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caBundle) {
			return nil, errors.New("webhook: caBundle holds no PEM certificate")
		}
		conf.RootCAs = pool
	}
	dial := c.opts.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: MaxTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	t := &http.Transport{
		TLSClientConfig:     conf,
		DialContext:         dial,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 100,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: MaxTimeout,
	}
	c.mu.transports[key] = t
	return t, nil
}
