package app

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// trackingRegisterer records what it registers so that Close can
// unregister it, letting a caller restart the store on the same registry.
type trackingRegisterer struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	cs  []prometheus.Collector
}

func (t *trackingRegisterer) Register(c prometheus.Collector) error {
	if err := t.reg.Register(c); err != nil {
		return err
	}
	t.mu.Lock()
	t.cs = append(t.cs, c)
	t.mu.Unlock()
	return nil
}

func (t *trackingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *trackingRegisterer) Unregister(c prometheus.Collector) bool { return t.reg.Unregister(c) }

func (t *trackingRegisterer) unregisterAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.cs {
		t.reg.Unregister(c)
	}
	t.cs = nil
}
