package watchpark

import (
	"log/slog"
	"sync"
	"time"
)

// Runner runs parked watches' resumptions on goroutines it keeps while
// they have work. A resumption's path (the relay down to the HTTP/2
// stream's write) needs more stack than a new goroutine starts with, so a
// goroutine per resumption would grow a stack by copying for every
// message to every watch; a kept goroutine keeps its stack, and a wake-up
// costs a hand-over instead of a goroutine's start and exit.
//
// Each idle goroutine waits on a channel of its own, in a stack (the one
// idle last is handed work first: its stack and data are the likeliest to
// be in cache); a wake-up pops one and hands it the resumption, or starts
// a goroutine when none is idle. A shared channel with a select would have
// every idle goroutine queued on it, and each hand-over lock it and walk
// that queue. A goroutine idle for a whole idle period is told to return,
// so an idle gateway keeps only its watches. Safe for concurrent use.
type Runner struct {
	log  *slog.Logger
	idle time.Duration

	mu sync.Mutex
	// waiting are the idle goroutines, the one idle last at the end.
	waiting []*runnerWorker
	// gen counts the reaper's rounds; a goroutine idle since an earlier
	// round than the last one has been idle a whole period. reaping: the
	// reaper's timer is armed (it is while any goroutine is idle).
	gen     uint64
	reaping bool
}

// runnerWorker is one of a Runner's goroutines.
type runnerWorker struct {
	// job hands the goroutine its next resumption; a zero one tells it to
	// return. Buffered (1): a hand-over never waits for the goroutine to
	// be parked on it.
	job chan resumption
	// since is the reaper's round when the goroutine went idle.
	since uint64
}

// resumption is a watch's resumption: h.run(resume).
type resumption struct {
	h      *Handoff
	resume func()
}

// DefaultIdle is how long a Runner's goroutine stays idle, at least, before
// it returns.
const DefaultIdle = time.Second

// NewRunner returns a Runner whose goroutines return once idle for idle
// (up to twice that; DefaultIdle when idle <= 0); log reports a panic of
// a resumed watch (slog.Default when nil).
func NewRunner(log *slog.Logger, idle time.Duration) *Runner {
	if log == nil {
		log = slog.Default()
	}
	if idle <= 0 {
		idle = DefaultIdle
	}
	return &Runner{log: log, idle: idle}
}

// start runs h.run(resume) on an idle goroutine, or a new one; with a nil
// r, on a new one.
func (r *Runner) start(h *Handoff, resume func()) {
	job := resumption{h, resume}
	if r == nil {
		go h.run(resume)
		return
	}
	r.mu.Lock()
	n := len(r.waiting)
	if n == 0 {
		r.mu.Unlock()
		go r.serve(&runnerWorker{job: make(chan resumption, 1)}, job)
		return
	}
	w := r.waiting[n-1]
	r.waiting[n-1] = nil
	r.waiting = r.waiting[:n-1]
	r.mu.Unlock()
	w.job <- job
}

// serve runs job, then each resumption handed to w, until told to return.
func (r *Runner) serve(w *runnerWorker, job resumption) {
	for job.h != nil {
		job.h.run(job.resume)
		job = resumption{}
		r.mu.Lock()
		w.since = r.gen
		r.waiting = append(r.waiting, w)
		if !r.reaping {
			r.reaping = true
			time.AfterFunc(r.idle, r.reap)
		}
		r.mu.Unlock()
		job = <-w.job
	}
}

// reap tells the goroutines idle since before the last round to return,
// and arms the next round while any goroutine is idle. The longest idle
// are at the front of waiting.
func (r *Runner) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	n := 0
	for n < len(r.waiting) && r.waiting[n].since+1 < r.gen {
		r.waiting[n].job <- resumption{}
		n++
	}
	rest := copy(r.waiting, r.waiting[n:])
	clear(r.waiting[rest:])
	r.waiting = r.waiting[:rest]
	if len(r.waiting) == 0 {
		r.reaping = false
		if cap(r.waiting) > 64 {
			r.waiting = nil
		}
		return
	}
	time.AfterFunc(r.idle, r.reap)
}

// logger is where a resumption's panic is reported.
func (r *Runner) logger() *slog.Logger {
	if r == nil {
		return slog.Default()
	}
	return r.log
}
