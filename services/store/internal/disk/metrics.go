package disk

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	refused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, g *Guard) (*metrics, error) {
	m := &metrics{
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_writes_refused_no_space_total",
			Help: "Writes refused before proposing because the disk is (nearly) full.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{
		m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_disk_available_bytes",
			Help: "Bytes available on the data directory's filesystem at the last check.",
		}, func() float64 { return float64(g.avail.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_disk_full",
			Help: "1 while writes are refused because a write hit ENOSPC and released the ballast.",
		}, func() float64 {
			if g.full.Load() {
				return 1
			}
			return 0
		}),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("disk: register metrics: %w", err)
		}
	}
	return m, nil
}
