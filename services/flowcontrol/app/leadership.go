package app

import (
	"context"
	"sync/atomic"

	"github.com/meridian-cp/meridian/services/flowcontrol/internal/leaderelect"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/server"
)

// leadership is server.Leadership of an elected replica: the context of
// the current term while it leads.
type leadership struct {
	term    atomic.Pointer[context.Context]
	elector *leaderelect.Elector
}

var _ server.Leadership = (*leadership)(nil)

// Term returns the current term, or nil and the leader the Lease names.
func (l *leadership) Term() (context.Context, string) {
	if t := l.term.Load(); t != nil {
		return *t, ""
	}
	if l.elector == nil {
		return nil, ""
	}
	leader, _ := l.elector.Leader()
	return nil, leader
}

func (l *leadership) start(term context.Context) { l.term.Store(&term) }

func (l *leadership) stop() { l.term.Store(nil) }
