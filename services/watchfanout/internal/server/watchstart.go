package server

import (
	"github.com/meridian-cp/meridian/lib/kube/readparams"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

// watchStart is where a watch starts, resolved from its request.
type watchStart struct {
	// rv is the requested resourceVersion, -1 when unset.
	rv int64
	// initial sends the current state first; endBookmark then sends the
	// k8s.io/initial-events-end bookmark.
	initial, endBookmark bool
}

// parseWatch resolves a watch's parameters (readparams.Watch) into where
// the cache starts it.
func parseWatch(req *watchv1.WatchRequest) (watchStart, error) {
	ws, err := readparams.Watch(readparams.WatchQuery{
		ResourceVersion: req.GetResourceVersion(), ResourceVersionMatch: req.GetResourceVersionMatch(),
		SendInitialEvents: req.SendInitialEvents, AllowWatchBookmarks: req.GetAllowBookmarks(),
	})
	if err != nil {
		return watchStart{}, err
	}
	start := watchStart{rv: ws.Revision, initial: ws.Initial, endBookmark: ws.EndBookmark}
	if ws.Semantic == readparams.MostRecent {
		start.rv = -1
	}
	return start, nil
}
