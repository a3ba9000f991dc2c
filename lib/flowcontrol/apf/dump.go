package apf

import (
	"cmp"
	"slices"
	"time"
)

// LevelDump is a priority level's state, for the debug endpoints
// (/debug/api_priority_and_fairness/dump_*).
type LevelDump struct {
	Name                                   string
	Exempt                                 bool
	Seats, SeatsInUse                      int
	ActiveQueues, Waiting, Executing       int
	Dispatched, Rejected, TimedOut, Cancel uint64
	VirtualTime                            float64
	Queues                                 []QueueDump
	Requests                               []RequestDump
}

// QueueDump is one queue's state.
type QueueDump struct {
	Waiting, SeatsWaiting, Executing, SeatsInUse int
	NextDispatchR                                float64
	// WorkWaiting is the work of the waiting requests in seat-seconds:
	// SeatsWaiting times the level's estimate of a request's execution
	// time per seat, what fair queuing charges them at dispatch.
	WorkWaiting float64
}

// RequestDump is one queued or executing request.
type RequestDump struct {
	FlowSchema, FlowDistinguisher string
	// QueueIndex is -1 in a level without queues (or a queue replaced by
	// a reconfiguration); IndexInQueue is -1 once executing.
	QueueIndex, IndexInQueue int
	Arrived, Started         time.Time // Started is zero while queued
	Seats                    int
	Digest                   Digest
}

// Dump returns the state of every priority level served, by name.
func (c *Controller) Dump() []LevelDump {
	st := c.cur.Load()
	out := make([]LevelDump, 0, len(st.levels))
	for _, l := range st.levels {
		out = append(out, l.dump())
	}
	slices.SortFunc(out, func(a, b LevelDump) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (l *level) dump() LevelDump {
	d := LevelDump{
		Name: l.cfg.Name, Exempt: l.cfg.Exempt,
		Dispatched: l.dispatched.Load(), Rejected: l.rejected.Load(), TimedOut: l.timedOut.Load(), Cancel: l.cancelled.Load(),
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.syncDemandLocked(l.now())
	d.Seats, d.SeatsInUse, d.ActiveQueues, d.Waiting, d.Executing = l.cfg.Seats, l.mu.seatsInUse, l.mu.active, l.mu.waiting, len(l.mu.executing)
	d.VirtualTime = l.mu.vt
	est := l.mu.estimate.get()
	index := map[*queue]int{}
	for i, q := range l.mu.queues {
		index[q] = i
		qd := QueueDump{
			Waiting: len(q.reqs), SeatsWaiting: q.seatsWaiting, SeatsInUse: q.seatsInUse, NextDispatchR: q.nextR,
			WorkWaiting: float64(q.seatsWaiting) * est,
		}
		d.Queues = append(d.Queues, qd)
		for j, r := range q.reqs {
			d.Requests = append(d.Requests, requestDump(r, i, j))
		}
	}
	for r := range l.mu.executing {
		qi, ok := index[r.queue]
		if !ok {
			qi = -1
		} else {
			d.Queues[qi].Executing++
		}
		d.Requests = append(d.Requests, requestDump(r, qi, -1))
	}
	slices.SortFunc(d.Requests, func(a, b RequestDump) int {
		return cmp.Or(cmp.Compare(a.QueueIndex, b.QueueIndex), cmp.Compare(a.IndexInQueue, b.IndexInQueue), a.Arrived.Compare(b.Arrived))
	})
	return d
}

func requestDump(r *request, queue, inQueue int) RequestDump {
	rd := RequestDump{
		FlowSchema: r.schema, FlowDistinguisher: r.distinguisher, QueueIndex: queue, IndexInQueue: inQueue,
		Arrived: r.enqueued, Seats: r.width,
	}
	if r.state == stateDispatched {
		rd.Started = r.dispatched
	}
	if r.digest != nil {
		rd.Digest = *r.digest
		rd.Digest.Groups = nil
	}
	return rd
}
