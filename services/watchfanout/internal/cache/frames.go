package cache

import "context"

// Encoded frames (and compressed list runs, Event.ListRun) are a cache
// of encodings: a JSON watch frame or the JSON
// a list copies is encoded once per event and handed to every reader
// (Event.Frame, Event.ObjectJSON). While lists and watches read them they
// save a decode and an encode per object and reader; once nobody reads
// them they are memory an idle process keeps for nothing, about the
// size of the objects again (15 MB for 10,000 ConfigMaps of 1 KiB). So
// every Options.FrameRetention the cache drops the frames of each
// current object that no reader asked for during the period before.
// Events only in the history leave it within Options.HistoryWindow,
// frames and all.

// dropUnreadFrames drops unread frames every Options.FrameRetention
// until ctx ends.
func (c *Cache) dropUnreadFrames(ctx context.Context) {
	c.everyResource(ctx, c.opts.FrameRetention, (*Resource).dropUnreadFrames)
}

// dropUnreadFrames drops the frames of every current object not read
// since the last call, and clears the read mark of the others. It holds
// the read lock while it walks the state, as a list does.
func (r *Resource) dropUnreadFrames() {
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.mu.state.Ascend(func(e *Event) bool {
		e.dropFramesIfUnread()
		return true
	})
}

// markRead marks e read; it writes the flag only when it changes, so that
// the many readers of a relist storm share the event's cache line.
func (e *Event) markRead() {
	if !e.read.Load() {
		e.read.Store(true)
	}
}

// dropFramesIfUnread drops e's frames if it was not read since the last
// call, and clears its read mark. Under e.mu, so that a Frame encoding
// now pushes onto the emptied list rather than back onto the dropped one.
func (e *Event) dropFramesIfUnread() {
	if e.read.Swap(false) || (e.frames.Load() == nil && e.runs.Load() == nil) {
		return
	}
	e.mu.Lock()
	e.frames.Store(nil)
	e.runs.Store(nil)
	e.mu.Unlock()
}
