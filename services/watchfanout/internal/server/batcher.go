package server

import (
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// sender sends a batch encoded by package batchcodec; on success gRPC owns its
// buffer.
type sender interface {
	sendEncoded(*batchcodec.Message) error
}

// batcher packs frames into WatchResponses of up to max bytes of frames,
// encoded by a batchcodec.Builder straight into the buffer gRPC will write (see
// package batchcodec): nothing is allocated per message, and the frames, shared
// by every watcher, are copied once.
type batcher struct {
	send sender // the watch (an interface holding it allocates nothing, a method value would)
	max  int
	enc  batchcodec.Builder
	msg  batchcodec.Message // reused: each send hands its buffer to gRPC
	n    int                // frames in the batch
	rev  int64
	// also: the other watches the next flush goes to (WatchMany); flush
	// clears it.
	also []int64
}

func (b *batcher) event(ev *cache.Event, kind cache.FrameKind, f cache.Format) error {
	var p pending
	if err := p.prepare(ev, kind, f); err != nil {
		return err
	}
	if !b.fits(p.n) {
		if err := b.flush(); err != nil {
			return err
		}
	}
	return b.put(&p, ev.Rev)
}

// pending is one event's frame on its way into a batch: encoded (frame,
// shared by every watcher of its format) or, in protobuf, spliced from
// the stored object straight into the batch (pf).
type pending struct {
	frame []byte
	pf    cache.ProtoFrame
	n     int // the frame's size
}

// prepare makes p the frame of ev as kind in format f.
func (p *pending) prepare(ev *cache.Event, kind cache.FrameKind, f cache.Format) error {
	if f == cache.FormatProtobuf && ev.ProtoFrame(kind, &p.pf) {
		p.frame, p.n = nil, p.pf.Size()
		return nil
	}
	frame, err := ev.Frame(kind, f)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	p.frame, p.n = frame, len(frame)
	return nil
}

// put adds p, of revision rev, without a flush.
func (b *batcher) put(p *pending, rev int64) error {
	if p.frame != nil {
		b.enc.Add(p.frame)
	} else if err := b.enc.AddAppend(p.n, p.pf.AppendTo); err != nil {
		return apierrors.NewInternalError(err)
	}
	b.n++
	b.rev = rev
	return nil
}

// fits reports whether a frame of n bytes joins the batch without a flush.
func (b *batcher) fits(n int) bool { return b.n == 0 || b.enc.Len()+n <= b.max }

// add adds a frame (rev 0: one without a revision, an ERROR), flushing
// first when it does not fit.
func (b *batcher) add(frame []byte, rev int64) error {
	if !b.fits(len(frame)) {
		if err := b.flush(); err != nil {
			return err
		}
	}
	b.enc.Add(frame)
	b.n++
	if rev > 0 {
		b.rev = rev
	}
	return nil
}

func (b *batcher) flush() error {
	if b.n == 0 {
		return nil
	}
	b.enc.FinishShared(b.rev, b.also, &b.msg)
	b.n, b.also = 0, nil
	err := b.send.sendEncoded(&b.msg)
	// gRPC took the buffer if it marshalled the message; if the send
	// failed before that, the buffer is still ours.
	b.msg.Release()
	return err
}

// release gives back the buffers of a watch that ended.
func (b *batcher) release() {
	b.enc.Reset()
	b.msg.Release()
	b.n = 0
}
