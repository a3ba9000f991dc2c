package cache

import (
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/selection"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// state is one state of an event as selectors and the watcher index read
// it: its metadata read from the stored bytes (name, namespace, labels),
// or the object decoded for selectors on a kind's own fields — each at
// most once for all the watchers an event is offered to, then dropped.
// Kept in the cache, they would cost more than the stored bytes they come
// from. A state belongs to one goroutine.
type state struct {
	o *object

	metaDone, metaOK bool
	name, namespace  string
	labels           map[string]string

	objDone bool
	obj     runtime.Object // decoded; nil if it could not be
}

// decoded returns the state decoded (nil if it could not be: the cache
// decoded it once when it arrived, so it can).
func (s *state) decoded(e *Event) runtime.Object {
	if !s.objDone {
		s.objDone = true
		s.obj, _ = s.o.decode(e.enc, e.Rev)
	}
	return s.obj
}

// meta returns the state's name, namespace and labels; false when they
// cannot be read.
func (s *state) meta(e *Event) (name, namespace string, labels map[string]string, ok bool) {
	if !s.metaDone {
		s.metaDone = true
		if s.o.spliceable {
			var err error
			s.name, s.namespace, s.labels, err = s.o.po.Metadata()
			s.metaOK = err == nil
		} else if obj := s.decoded(e); obj != nil {
			if acc, err := meta.Accessor(obj); err == nil {
				s.name, s.namespace, s.labels, s.metaOK = acc.GetName(), acc.GetNamespace(), acc.GetLabels(), true
			}
		}
	}
	return s.name, s.namespace, s.labels, s.metaOK
}

// matches reports whether f selects the state: from its metadata alone
// when f looks at nothing else, else from the decoded object.
func (s *state) matches(e *Event, f *selection.Filter) bool {
	if f.Empty() {
		return true
	}
	if s.o != nil && s.o.err != nil {
		// Unreadable (it did not decrypt): of what selectors look at,
		// only its name is known, from its key. Whatever else f asks,
		// the object is selected, so that the read fails with the
		// reason rather than leaving the object out.
		name, ok := f.Name()
		return !ok || name == nameOfKey(e.Key)
	}
	if f.MetadataOnly() {
		name, ns, labels, ok := s.meta(e)
		return ok && f.MatchesMetadata(name, ns, labels)
	}
	obj := s.decoded(e)
	return obj != nil && f.Matches(obj)
}

// view is an event as the dispatcher offers it to watchers: its two
// states, each read at most once however many watchers look.
type view struct {
	ev        *Event
	cur, prev state
}

func newView(ev *Event) view { return view{ev: ev, cur: state{o: ev.obj}, prev: state{o: ev.prev}} }

// nameOfKey is the object name of a store key, its last segment.
func nameOfKey(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }
