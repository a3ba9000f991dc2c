package cache

// watcherSet holds a resource's registered watchers, indexed so that an
// event is offered only to the watchers it can concern.
//
// Every watcher is filed under its namespace ("" for all-namespace and
// cluster-scoped watches) and, within it, under the most selective thing
// its selectors pin, if any:
//
//   - metadata.name=N (a field selector): byName[N]. One object's
//     informer, kubectl get NAME --watch, kubectl wait.
//   - a label equality, k=v or k in (v): byLabel[k][v]. The controllers
//     of one app or one owner each watching their own objects.
//   - nothing: all, offered every event of the namespace.
//
// Without the index, dispatching one event costs a filter evaluation per
// watcher of the namespace; with it, 10,000 watchers each pinning their
// own object cost a map lookup per event (BenchmarkDispatch). An index
// never changes what a watcher receives: a watcher filed under name N or
// label k=v can only match an object whose current or previous state has
// that name or label, and those are exactly the sets an event is offered
// to (both states, for selector transitions).
//
// A watcherSet is guarded by its Resource's mu.
type watcherSet struct {
	n    int
	byNS map[string]*nsWatchers
}

// nsWatchers are the watchers of one namespace.
type nsWatchers struct {
	all     map[*Watcher]struct{}
	byName  map[string]map[*Watcher]struct{}
	byLabel map[string]map[string]map[*Watcher]struct{}
}

// watchKey is where a watcher is filed: kind, then the name or the label
// key and value.
type watchKey struct {
	kind       uint8
	key, value string
}

// The kinds of watchKey.
const (
	keyNone uint8 = iota
	keyName
	keyLabel
)

// keyFor decides where w is filed from its filter.
func keyFor(w *Watcher) watchKey {
	if name, ok := w.filter.Name(); ok {
		return watchKey{kind: keyName, value: name}
	}
	if k, v, ok := w.filter.LabelEquals(); ok {
		return watchKey{kind: keyLabel, key: k, value: v}
	}
	return watchKey{}
}

func newWatcherSet() *watcherSet { return &watcherSet{byNS: map[string]*nsWatchers{}} }

// len is the number of watchers.
func (s *watcherSet) len() int { return s.n }

// add files w under w.ns and w.key.
func (s *watcherSet) add(w *Watcher) {
	ns := s.byNS[w.ns]
	if ns == nil {
		ns = &nsWatchers{}
		s.byNS[w.ns] = ns
	}
	switch w.key.kind {
	case keyName:
		ns.byName = addTo(ns.byName, w.key.value, w)
	case keyLabel:
		if ns.byLabel == nil {
			ns.byLabel = map[string]map[string]map[*Watcher]struct{}{}
		}
		ns.byLabel[w.key.key] = addTo(ns.byLabel[w.key.key], w.key.value, w)
	default:
		if ns.all == nil {
			ns.all = map[*Watcher]struct{}{}
		}
		ns.all[w] = struct{}{}
	}
	s.n++
}

func addTo(m map[string]map[*Watcher]struct{}, k string, w *Watcher) map[string]map[*Watcher]struct{} {
	if m == nil {
		m = map[string]map[*Watcher]struct{}{}
	}
	set := m[k]
	if set == nil {
		set = map[*Watcher]struct{}{}
		m[k] = set
	}
	set[w] = struct{}{}
	return m
}

// remove unfiles w; false when it was not filed. Safe while a range over
// the set (forEvent, all) is running: it only deletes map entries.
func (s *watcherSet) remove(w *Watcher) bool {
	ns := s.byNS[w.ns]
	if ns == nil {
		return false
	}
	var ok bool
	switch w.key.kind {
	case keyName:
		ok = removeFrom(ns.byName, w.key.value, w)
	case keyLabel:
		if vals := ns.byLabel[w.key.key]; vals != nil {
			if ok = removeFrom(vals, w.key.value, w); ok && len(vals) == 0 {
				delete(ns.byLabel, w.key.key)
			}
		}
	default:
		if _, ok = ns.all[w]; ok {
			delete(ns.all, w)
		}
	}
	if !ok {
		return false
	}
	if len(ns.all) == 0 && len(ns.byName) == 0 && len(ns.byLabel) == 0 {
		delete(s.byNS, w.ns)
	}
	s.n--
	return true
}

func removeFrom(m map[string]map[*Watcher]struct{}, k string, w *Watcher) bool {
	set := m[k]
	if _, ok := set[w]; !ok {
		return false
	}
	delete(set, w)
	if len(set) == 0 {
		delete(m, k)
	}
	return true
}

// forEvent calls fn for every watcher the event of v can concern (a
// superset of those it matches; fn still filters).
func (s *watcherSet) forEvent(v *view, fn func(*Watcher)) {
	s.forNamespace(s.byNS[""], v, fn)
	if v.ev.Namespace != "" {
		s.forNamespace(s.byNS[v.ev.Namespace], v, fn)
	}
}

func (s *watcherSet) forNamespace(ns *nsWatchers, v *view, fn func(*Watcher)) {
	if ns == nil {
		return
	}
	for w := range ns.all {
		fn(w)
	}
	if len(ns.byName) == 0 && len(ns.byLabel) == 0 {
		return
	}
	name, _, curLabels, ok := v.cur.meta(v.ev)
	if !ok {
		if v.cur.o != nil && v.cur.o.err != nil {
			// Unreadable: its labels are unknown, so every label
			// watcher may be concerned (state.matches).
			for w := range ns.byName[nameOfKey(v.ev.Key)] {
				fn(w)
			}
			for _, vals := range ns.byLabel {
				for _, set := range vals {
					for w := range set {
						fn(w)
					}
				}
			}
		}
		return
	}
	for w := range ns.byName[name] {
		fn(w)
	}
	if len(ns.byLabel) == 0 {
		return
	}
	var prevLabels map[string]string
	if v.ev.prev != nil {
		_, _, prevLabels, _ = v.prev.meta(v.ev)
	}
	for key, vals := range ns.byLabel {
		v, has := curLabels[key]
		if has {
			for w := range vals[v] {
				fn(w)
			}
		}
		if pv, hadPrev := prevLabels[key]; hadPrev && (!has || pv != v) {
			for w := range vals[pv] {
				fn(w)
			}
		}
	}
}

// all calls fn for every watcher.
func (s *watcherSet) all(fn func(*Watcher)) {
	for _, ns := range s.byNS {
		for w := range ns.all {
			fn(w)
		}
		for _, set := range ns.byName {
			for w := range set {
				fn(w)
			}
		}
		for _, vals := range ns.byLabel {
			for _, set := range vals {
				for w := range set {
					fn(w)
				}
			}
		}
	}
}
