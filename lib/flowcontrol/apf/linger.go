package apf

import "time"

// finish returns the seats of a released grant: at once, or after its
// linger (a write's watch notifications, Digest.AdditionalLatency), as
// kube-apiserver's queueset keeps a finished request's final seats for
// its additional latency. A lingering grant is no longer held (a second
// Release fails with ErrUnknownGrant, Forget and the gateway's expiry no
// longer see it); its seats come back when the linger ends.
func (c *Controller) finish(h *held) {
	if h.linger <= 0 {
		h.level.release(h.req, true)
		return
	}
	time.AfterFunc(h.linger, func() { h.level.release(h.req, true) })
}
