package admissionclient

import (
	"context"
	"time"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// UnreachableWait is how long Admit waits for an unreachable admission
// service (a replica restarting, a rolling upgrade of a single replica)
// before it gives up: long enough to cover a restart, well within
// kube-apiserver's default request timeout of 60 s.
const UnreachableWait = 10 * time.Second

// Backoff between attempts while the service is unreachable: from
// retryFirst, doubling, up to retryMax. Before each attempt the
// connection's own reconnect backoff (which grows to minutes) is reset,
// so that an attempt after the service came back finds it.
const (
	retryFirst = 50 * time.Millisecond
	retryMax   = time.Second
)

// Admit asks the admission service about a write. While the service is
// unreachable (UNAVAILABLE: no connection, or the connection broke
// during the call) it tries again, for up to the client's wait
// (UnreachableWait) and never past ctx's deadline, and then returns the
// last UNAVAILABLE error. Sending a request again is safe: an admission
// review changes nothing (kube-apiserver's webhook client retries
// connection failures the same way), and the write it is about has not
// been sent to the store. Other errors are returned at once.
func (c *Client) Admit(ctx context.Context, req *admissionv1.AdmitRequest, opts ...grpc.CallOption) (*admissionv1.AdmitResponse, error) {
	giveUp := time.Now().Add(c.wait)
	if d, ok := ctx.Deadline(); ok && d.Before(giveUp) {
		giveUp = d
	}
	backoff := retryFirst
	for {
		resp, err := c.AdmissionServiceClient.Admit(ctx, req, opts...)
		if status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			return resp, err
		}
		if time.Until(giveUp) < backoff {
			return nil, err
		}
		c.metrics.retries.Inc()
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
		backoff = min(2*backoff, retryMax)
		c.conn.ResetConnectBackoff()
	}
}
