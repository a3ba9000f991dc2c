package apf

import (
	"math"
	"time"
)

// Borrowing between priority levels, as kube-apiserver's (KEP-1040,
// "borrowing"): every BorrowingPeriod each level's seat demand (seats
// executing plus seats queued) over the period gives its average,
// standard deviation and high watermark; its smoothed demand is
// max(avg + stddev, 0.977 × the previous smoothed + 0.023 × (avg + stddev)).
// Each level then gets a current limit between its lower bound — its
// nominal limit less what it may lend (lendablePercent), raised to its
// high watermark up to the nominal limit — and its upper bound — its
// nominal limit plus what it may borrow (borrowingLimitPercent; unset:
// the server limit) — in proportion to its smoothed demand, so that the
// limits add up to the server limit. Exempt levels hold no seats; their
// high watermark above their lower bound is taken from the server limit
// first.

// DefaultBorrowingPeriod is how often limits are adjusted.
const DefaultBorrowingPeriod = 10 * time.Second

// smoothing is kube-apiserver's seatDemandSmoothingCoefficient.
const smoothing = 0.977

// integrator accumulates a level's seat demand over time.
type integrator struct {
	duration, sum, sumSquares, max float64
}

func (i *integrator) add(value, seconds float64) {
	i.duration += seconds
	i.sum += value * seconds
	i.sumSquares += value * value * seconds
}

// demandStats is one period's demand of a level.
type demandStats struct {
	avg, stdDev float64
	highWater   int
}

// takeDemandLocked ends the level's demand period at now: it returns its
// statistics, updates the smoothed demand, and starts the next period.
func (l *level) takeDemandLocked(now time.Time) demandStats {
	l.syncDemandLocked(now)
	d := l.mu.demand
	current := float64(l.mu.seatsInUse + l.mu.seatsWaiting)
	l.mu.demand = integrator{max: current}
	st := demandStats{highWater: int(math.Round(d.max))}
	if d.duration <= 0 {
		return st
	}
	st.avg = d.sum / d.duration
	st.stdDev = math.Sqrt(max(0, d.sumSquares/d.duration-st.avg*st.avg))
	envelope := st.avg + st.stdDev
	l.mu.smoothed = max(envelope, smoothing*l.mu.smoothed+(1-smoothing)*envelope)
	return st
}

// adjustBorrowing sets every level's current limit from its demand, at
// now, so that the limited levels' limits add up to serverLimit.
func adjustBorrowing(levels []*level, serverLimit int, now time.Time) {
	type item struct {
		l                    *level
		lower, upper, target float64
	}
	var items []item
	remaining := serverLimit
	for _, l := range levels {
		l.mu.Lock()
		st := l.takeDemandLocked(now)
		cfg, smoothed := l.cfg, l.mu.smoothed
		l.mu.Unlock()
		if cfg.MaxSeats == 0 {
			continue // fixed limit
		}
		if cfg.Exempt {
			remaining -= max(cfg.MinSeats, st.highWater)
			continue
		}
		lower := max(cfg.MinSeats, min(cfg.Nominal, st.highWater))
		items = append(items, item{l: l, lower: float64(lower), upper: float64(cfg.MaxSeats), target: max(float64(lower), smoothed)})
	}
	if len(items) == 0 {
		return
	}
	bounds := make([][3]float64, len(items))
	for i, it := range items {
		bounds[i] = [3]float64{it.lower, it.upper, it.target}
	}
	alloc := allocate(float64(max(remaining, 0)), bounds)
	for i, it := range items {
		it.l.setSeats(int(math.Round(alloc[i])), now)
	}
}

// allocate returns, for items of (lower, upper, target), amounts within
// their bounds, each clamp(f × target) for the one fair fraction f that
// makes them add up to total (all lower bounds when they exceed it, all
// upper bounds when they fall short). A target below 0.001 counts as
// 0.001, so every item has a share.
func allocate(total float64, items [][3]float64) []float64 {
	sum := func(f float64) float64 {
		s := 0.0
		for _, it := range items {
			s += min(max(f*max(it[2], 0.001), it[0]), it[1])
		}
		return s
	}
	lo, hi := 0.0, 1.0
	for sum(hi) < total && hi < 1e12 {
		hi *= 2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if sum(mid) < total {
			lo = mid
		} else {
			hi = mid
		}
	}
	out := make([]float64, len(items))
	for i, it := range items {
		out[i] = min(max(hi*max(it[2], 0.001), it[0]), it[1])
	}
	return out
}

// setSeats sets the level's current limit and dispatches what it allows.
func (l *level) setSeats(seats int, now time.Time) {
	l.mu.Lock()
	defer l.unlock()
	l.syncDemandLocked(now)
	l.cfg.Seats = seats
	l.setLimitGaugesLocked()
	if l.cfg.Queuing != nil {
		l.dispatchLocked(now)
	}
}

// setLimitGaugesLocked publishes the level's limits.
func (l *level) setLimitGaugesLocked() {
	if l.cfg.Exempt {
		return
	}
	nominal := l.cfg.Nominal
	if l.cfg.MaxSeats == 0 {
		nominal = l.cfg.Seats
	}
	l.metrics.nominalLimit.WithLabelValues(l.cfg.Name).Set(float64(nominal))
	l.metrics.currentLimit.WithLabelValues(l.cfg.Name).Set(float64(l.cfg.Seats))
}
