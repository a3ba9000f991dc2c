package audit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// WebhookOptions are kube-apiserver's --audit-webhook-* settings (batch
// mode).
type WebhookOptions struct {
	// ConfigFile is a kubeconfig naming the webhook's server (its URL
	// and CA) and the credentials the gateway presents (client
	// certificate or token), as kube-apiserver's
	// --audit-webhook-config-file.
	ConfigFile string
	// BatchMaxSize is the most events one POST carries; BatchMaxWait the
	// longest an event waits for its batch to fill.
	BatchMaxSize int
	BatchMaxWait time.Duration
	// BufferSize is the most events waiting to be sent: events arriving
	// when it is full are dropped (and counted), never waited for.
	BufferSize int
	// Timeout bounds one POST.
	Timeout time.Duration
}

// Defaults of kube-apiserver's batch webhook backend.
const (
	DefaultBatchMaxSize = 400
	DefaultBatchMaxWait = 30 * time.Second
	DefaultBufferSize   = 10000
	defaultTimeout      = 30 * time.Second
)

// errBufferFull is the failure of an event dropped because the webhook's
// buffer is full.
var errBufferFull = errors.New("the webhook's buffer is full: the webhook is slower than the events")

// WebhookSink sends events to a webhook as audit.k8s.io/v1 EventLists,
// POSTed in batches by one goroutine. Write never blocks: an event that
// finds the buffer full is dropped and counted
// (apiserver_audit_error_total{plugin="webhook"}).
type WebhookSink struct {
	url    string
	client *http.Client
	o      WebhookOptions

	// mu orders Write's sends before Close's close of queue.
	mu     sync.RWMutex
	closed bool
	queue  chan []byte
	done   chan struct{}
	// ctx ends the POSTs still being made when Close has waited Timeout.
	ctx    context.Context
	cancel context.CancelFunc
	failed func(plugin string, n int, err error)
}

// NewWebhookSink loads the webhook's kubeconfig and starts the sender;
// Close flushes what is buffered and stops it.
func NewWebhookSink(o WebhookOptions) (*WebhookSink, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", o.ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("audit: webhook config %s: %w", o.ConfigFile, err)
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	cfg.Timeout = o.Timeout
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("audit: webhook config %s: %w", o.ConfigFile, err)
	}
	return newWebhookSink(cfg.Host, client, o), nil
}

func newWebhookSink(url string, client *http.Client, o WebhookOptions) *WebhookSink {
	if o.BatchMaxSize <= 0 {
		o.BatchMaxSize = DefaultBatchMaxSize
	}
	if o.BatchMaxWait <= 0 {
		o.BatchMaxWait = DefaultBatchMaxWait
	}
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	s := &WebhookSink{url: url, client: client, o: o, queue: make(chan []byte, o.BufferSize), done: make(chan struct{}),
		failed: func(string, int, error) {}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	go s.run()
	return s
}

func (s *WebhookSink) reportFailures(failed func(string, int, error)) { s.failed = failed }

// Write queues an event, or drops it when the buffer is full or the sink
// is closed.
func (s *WebhookSink) Write(event []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return
	}
	select {
	case s.queue <- event:
	default:
		s.failed("webhook", 1, errBufferFull)
	}
}

// run sends batches until the queue is closed and drained: a batch goes
// when it holds BatchMaxSize events or its first event has waited
// BatchMaxWait.
func (s *WebhookSink) run() {
	defer close(s.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	batch := make([][]byte, 0, s.o.BatchMaxSize)
	for {
		ev, ok := <-s.queue
		if !ok {
			return
		}
		batch = append(batch[:0], ev)
		timer.Reset(s.o.BatchMaxWait)
	fill:
		for len(batch) < s.o.BatchMaxSize {
			select {
			case ev, ok := <-s.queue:
				if !ok {
					break fill
				}
				batch = append(batch, ev)
			case <-timer.C:
				break fill
			}
		}
		timer.Stop()
		if err := s.send(batch); err != nil {
			s.failed("webhook", len(batch), err)
		}
	}
}

// eventListHead and eventListTail enclose a batch's events (each already
// an encoded Event) in an EventList.
const (
	eventListHead = `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":[`
	eventListTail = "]}\n"
)

// send POSTs one batch as an EventList; a response other than 2xx is an
// error.
func (s *WebhookSink) send(batch [][]byte) error {
	var body bytes.Buffer
	body.WriteString(eventListHead)
	for i, ev := range batch {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(bytes.TrimSuffix(ev, []byte("\n")))
	}
	body.WriteString(eventListTail)
	ctx, cancel := context.WithTimeout(s.ctx, s.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url, &body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("audit webhook: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("audit webhook: %s answered %s", s.url, resp.Status)
	}
	return nil
}

// Close stops accepting events and sends what is buffered, for at most
// Timeout: then the POSTs still to make fail (and are counted), so that
// a webhook that is down holds shutdown up no longer.
func (s *WebhookSink) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.queue)
	}
	s.mu.Unlock()
	t := time.NewTimer(s.o.Timeout)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.cancel()
		<-s.done
	}
	s.cancel()
	return nil
}
