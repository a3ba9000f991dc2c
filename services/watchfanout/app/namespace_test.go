package app_test

import (
	"strconv"
	"testing"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// TestReplayStaysInItsNamespace: a namespaced watch from a revision in
// the history replays the changes of its namespace only, then follows
// them live; a watch of every namespace replays them all.
func TestReplayStaysInItsNamespace(t *testing.T) {
	replayStaysInItsNamespace(t, newEnv(t, app.Config{}))
}

func replayStaysInItsNamespace(t *testing.T, e *env) {
	// A write first, so that the revision before the next is not 0 ("any
	// state"): the watches below start in the history.
	e.mustPut(configMap("elsewhere", "before", nil, ""))
	first := e.mustPut(configMap("ns", "mine", nil, "1"))
	e.mustPut(configMap("other", "theirs", nil, "not for ns"))
	e.mustPut(configMap("ns", "mine", nil, "2"))
	from := strconv.FormatInt(first-1, 10)

	type want struct{ typ, ns, name, data string }
	check := func(s *stream, wants []want) {
		t.Helper()
		for _, w := range wants {
			ev := s.next(t)
			if m := ev.Object.Metadata; ev.Type != w.typ || m.Namespace != w.ns || m.Name != w.name || ev.Object.Data["d"] != w.data {
				t.Fatalf("got %s %s/%s (rv %s, data %q), want %s %s/%s (data %q)", ev.Type, m.Namespace, m.Name, m.ResourceVersion, ev.Object.Data["d"], w.typ, w.ns, w.name, w.data)
			}
		}
	}
	ns := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, Namespace: "ns", ResourceVersion: from})
	all := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: from})
	check(ns, []want{{"ADDED", "ns", "mine", "1"}, {"MODIFIED", "ns", "mine", "2"}})
	// Live, the other namespace's changes stay out too.
	e.mustPut(configMap("other", "theirs", nil, "still not for ns"))
	e.mustPut(configMap("ns", "mine", nil, "3"))
	check(ns, []want{{"MODIFIED", "ns", "mine", "3"}})
	check(all, []want{
		{"ADDED", "ns", "mine", "1"}, {"ADDED", "other", "theirs", "not for ns"}, {"MODIFIED", "ns", "mine", "2"},
		{"MODIFIED", "other", "theirs", "still not for ns"}, {"MODIFIED", "ns", "mine", "3"},
	})
}
