package apf

import (
	"slices"
	"testing"
)

// levels are the seats and queues of the fixed configuration of the
// tests; zero values mean catch-all 200 seats, global-default 200 seats
// with 128 queues, hand size 6, 50 per queue.
type levels struct {
	catchAll, globalDefault       int
	queues, handSize, queueLength int
}

// fixedConfig is the tests' configuration: levels exempt, catch-all
// (rejects) and global-default (queues) with l's seats and queues, and
// the bootstrap flow schemas exempt, probes, global-default (for
// system:authenticated only, so that anonymous requests reach catch-all)
// and catch-all.
func fixedConfig(l levels) Configuration {
	or := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	conf := Bootstrap(DefaultServerConcurrencyLimit)
	conf.Schemas = slices.DeleteFunc(conf.Schemas, func(s FlowSchema) bool {
		return !slices.Contains([]string{SchemaExempt, SchemaProbes, SchemaGlobalDefault, SchemaCatchAll}, s.Name)
	})
	for i := range conf.Schemas {
		if conf.Schemas[i].Name == SchemaGlobalDefault {
			conf.Schemas[i].Rules = []Rule{everything(Subjects{Groups: []string{GroupAuthenticated}})}
		}
	}
	conf.Levels = []PriorityLevel{
		{Name: LevelExempt, Exempt: true},
		{Name: LevelCatchAll, Seats: or(l.catchAll, 200)},
		{Name: LevelGlobalDefault, Seats: or(l.globalDefault, 200), Queuing: &Queuing{
			Queues: or(l.queues, 128), HandSize: or(l.handSize, 6), QueueLengthLimit: or(l.queueLength, 50),
		}},
	}
	return conf
}

// newFixed returns a Controller of cfg serving fixedConfig(l).
func newFixed(t *testing.T, cfg Config, l levels) *Controller {
	t.Helper()
	c := newController(t, cfg)
	if err := c.Apply(fixedConfig(l)); err != nil {
		t.Fatal(err)
	}
	return c
}
