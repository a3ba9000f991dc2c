package raftnode

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Commit notices: telling every follower of a commit without the
// barrier's log writes.
//
// The nudge's barrier (nudge.go) reaches a follower with raft's next
// AppendEntries to it. It leaves only once the leader has written it to
// its own log, and the follower applies the commit only once it has
// written the barrier to its log as well: two fsyncs (milliseconds on a
// loaded disk) between a lone write's commit and the moment a follower,
// and the watches it serves, see it. And replication sends one
// AppendEntries at a time per follower
// (trackedTransport.AppendEntriesPipeline), so while one is in flight —
// over a long link, for the whole round trip — the barrier waits for its
// answer: a follower one region away would learn of a commit one and a
// half round trips after the leader sent the entry, not half a round trip
// after the commit.
//
// So along with each nudge the leader sends each other member of the
// configuration a commit notice on its own connection (a lone commit's
// notices start at the follower's answer that makes it one,
// acknotice.go, or else when raft hands it to the leader's FSM,
// nudgingFSM.ApplyBatch; either before the nudger's goroutine runs): an
// AppendEntries whose LeaderCommitIndex is the commit index, in the
// leader's current term. To a follower that
// acknowledged the committed entry, or whose request in flight carries
// it, the notice carries no entries and its previous entry is the commit
// index itself: the follower writes nothing to its log before applying.
// When the request in flight carries only earlier entries (writes come
// closer together than the round trip, so raft's next request waits), the
// notice carries the entries after the last one in flight; when raft has
// not sent the follower the committed entry yet (the commit came from the
// other followers' answers), those after the last it acknowledged.
// Entries are read from the leader's log. It is an AppendEntries like
// raft's own, and raft's checks make it safe: the
// follower accepts it only if it has the previous entry with the term the
// leader's log gives it (log matching: its log is then the leader's up to
// there), appends what it lacks (entries it has are skipped as
// duplicates), and applies up to the commit index. One that does not have
// the previous entry yet (the request in flight is read after the
// notice, on a short link) answers success=false and changes nothing, and
// is sent the notice again, carrying the entries after its last
// (retryNotice); the notice is not part of raft's replication, whose next
// index for that follower it does not touch. One that refuses that too
// learns of the commit from the nudge's barrier (nudge.go). A follower
// in a newer term rejects the notice by its term. The price is one small
// request per follower per pause in the writes, and, to a follower whose
// request in flight lacks the committed entries, those a second time.

// A follower that has just stored an entry tells others of its commit
// too, when its copy, the leader's and theirs are a majority: before the
// leader hears of it (followernotice.go). Its notices go on the same
// connections.

// Notices to a follower go in order on a connection of their own, raft's
// pipeline (which raft's replication does not use), without waiting for
// answers: one per nudge, up to noticePipelineDepth in flight. Notices go
// out with the nudges, once per pause in the writes: a steady stream of
// writes sends none.

// noticePipelineDepth is how many notices may be in flight to one
// follower (the transport's MaxRPCsInFlight; raft's own replication does
// not pipeline, see trackedTransport.AppendEntriesPipeline).
const noticePipelineDepth = 16

// noticer sends commit notices to followers (see above).
type noticer struct {
	node *Node
	ctx  context.Context // ends with the node: no notice is started after

	mu    sync.Mutex
	peers map[raft.ServerID]*noticePeer
	// changed is closed, and replaced, whenever a peer's answer (or a
	// failure to send it a notice) is recorded: awaitAccepted waits on it.
	changed chan struct{}
}

// noticePeer is the notice state of one follower, guarded by noticer.mu.
type noticePeer struct {
	id   raft.ServerID
	addr raft.ServerAddress
	// nonVoter is whether it was a non-voter when last sent a notice
	// (read by answers without the lock).
	nonVoter atomic.Bool

	want    uint64 // the newest commit index to tell it
	term    uint64 // the term in which want was committed
	sent    uint64 // the newest commit index sent to it
	sending bool   // a goroutine is sending to it
	// stored is the follower notice (followernotice.go) that commits
	// want, when this node follows; nil for the leader's own.
	stored *raft.AppendEntriesRequest
	// pipe carries the notices to it, in order, on a connection of their
	// own, without waiting for answers; nil until the first, and after
	// a failure.
	pipe *noticePipe
	// retryFrom, when not 0, is the entry the next notice of want starts
	// from, carrying the entries after it (retryNotice).
	retryFrom uint64
	// accepted is the newest commit of this node's own notices (as
	// leader) it accepted; failed, of those it refused or that could not
	// be sent to it.
	accepted, failed termIndex
}

// termIndex is a commit index and the term it was committed in.
type termIndex struct{ term, index uint64 }

// raise makes t the later of t and (term, index).
func (t *termIndex) raise(term, index uint64) {
	if term > t.term || term == t.term && index > t.index {
		*t = termIndex{term, index}
	}
}

// covers reports whether t is index or a later one, in term.
func (t termIndex) covers(term, index uint64) bool { return t.term == term && t.index >= index }

// noticePipe is the transport's pipeline to one follower, and the
// goroutine that reads its answers.
type noticePipe struct {
	raft.AppendPipeline
	done chan struct{}
	once sync.Once
}

// close closes the pipeline and stops the goroutine reading its answers.
func (p *noticePipe) close() {
	p.once.Do(func() {
		close(p.done)
		_ = p.AppendPipeline.Close()
	})
}

// noticeTo reports whether follower id can be sent a commit notice for
// commit, and from which entry (last; the notice carries the entries
// after it, up to commit). When raft's replication to it waits for the
// answer to an AppendEntries carrying entries below commit, last is the
// highest index those carry. When that request carries the committed
// entry, last is commit: the follower will have stored it when the
// notice comes, but for a race on a short link (the notice on its own
// connection may be read first), which answers retries (retryNotice).
// When raft's replication to it is idle and the follower acknowledged
// entries only below commit (raft has not sent it the rest yet: the
// commit came from the other followers' answers), last is the highest
// index it acknowledged. Otherwise last is commit itself. On the
// in-memory transport of a single member, which has no followers, there
// is none to send.
func (n *Node) noticeTo(id raft.ServerID, commit uint64) (last uint64, ok bool) {
	t, tracked := n.trans.(*trackedTransport)
	if !tracked {
		return 0, false
	}
	inFlight, acked, busy := t.replicationTo(id)
	switch {
	case busy && inFlight < commit:
		return inFlight, true
	case !busy && acked > 0 && acked < commit:
		return acked, true
	}
	return commit, true
}

// maxNoticeEntries bounds the entries a notice carries: a follower further
// behind than that is catching up, and raft's replication serves it.
const maxNoticeEntries = 64

// noticeRequest is the commit notice for index commit in term, from the
// node with header, to a follower whose AppendEntries in flight carries
// entries up to index last: when last < commit, it carries the entries
// after last, which the follower does not have yet, and starts from last.
// It returns nil when those entries cannot be read (compacted away) or are
// too many.
func (n *Node) noticeRequest(header raft.RPCHeader, term, commit, last uint64) *raft.AppendEntriesRequest {
	req := &raft.AppendEntriesRequest{
		RPCHeader:         header,
		Term:              term,
		Leader:            header.Addr,
		PrevLogEntry:      commit,
		PrevLogTerm:       term,
		LeaderCommitIndex: commit,
	}
	if last >= commit {
		return req
	}
	if last == 0 || commit-last > maxNoticeEntries {
		return nil
	}
	var prev raft.Log
	if err := n.logs.GetLog(last, &prev); err != nil {
		return nil
	}
	entries, err := n.readLogs(last+1, commit)
	if err != nil {
		return nil
	}
	req.PrevLogEntry, req.PrevLogTerm, req.Entries = last, prev.Term, entries
	return req
}

// readLogs reads the entries from index first to last from the log.
func (n *Node) readLogs(first, last uint64) ([]*raft.Log, error) {
	logs := make([]*raft.Log, 0, last-first+1)
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := n.logs.GetLog(i, l); err != nil {
			return nil, err
		}
		logs = append(logs, l)
	}
	return logs, nil
}

// notify tells every other member of the configuration that commit is
// committed in term, if this node still leads in term. It never blocks on
// the network.
func (c *noticer) notify(term, commit uint64) {
	n := c.node
	if commit == 0 || !n.IsLeader() || n.raft.CurrentTerm() != term {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == n.id {
			continue
		}
		if _, ok := n.noticeTo(s.ID, commit); !ok {
			continue
		}
		p := c.peer(s)
		if commit <= p.want && term == p.term {
			continue
		}
		p.want, p.term, p.stored = commit, term, nil
		c.start(p)
	}
}

// peer returns the notice state of s, new if s is new or moved. c.mu is
// held.
func (c *noticer) peer(s raft.Server) *noticePeer {
	if c.peers == nil {
		c.peers = make(map[raft.ServerID]*noticePeer)
	}
	p := c.peers[s.ID]
	if p == nil || p.addr != s.Address {
		p = &noticePeer{id: s.ID, addr: s.Address}
		c.peers[s.ID] = p
	}
	p.nonVoter.Store(s.Suffrage != raft.Voter)
	return p
}

// start starts a goroutine sending to p, unless one is. c.mu is held.
func (c *noticer) start(p *noticePeer) {
	if !p.sending {
		p.sending = true
		go c.send(p)
	}
}

// send sends p its newest wanted commit index until it has sent every one,
// or the node stops. A notice that fails or is refused is not sent again:
// it is recorded (answered), and the nudger appends a barrier, which
// reaches the follower with raft's replication.
func (c *noticer) send(p *noticePeer) {
	n := c.node
	header := raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersionMax,
		ID:              []byte(n.id),
		Addr:            n.trans.EncodePeer(raft.ServerID(n.id), n.trans.LocalAddr()),
	}
	for {
		c.mu.Lock()
		commit, term, pipe, stored, from := p.want, p.term, p.pipe, p.stored, p.retryFrom
		if commit == p.sent || c.ctx.Err() != nil {
			p.sending = false
			c.mu.Unlock()
			return
		}
		p.sent, p.retryFrom = commit, 0
		c.mu.Unlock()
		req := stored
		if req == nil {
			last, ok := n.noticeTo(p.id, commit)
			if from > 0 && from < commit {
				last = from
			}
			if ok {
				req = n.noticeRequest(header, term, commit, last)
			}
		}
		if req == nil {
			c.answered(p, term, commit, false) // the barrier goes out at once
			continue
		}
		var err error
		if pipe == nil {
			pipe, err = c.openPipe(p)
		}
		if err == nil {
			if _, err = pipe.AppendEntries(req, new(raft.AppendEntriesResponse)); err != nil {
				c.dropPipe(p, pipe)
			}
		}
		if err != nil && stored == nil { // the leader's own: the nudger waits for it
			c.answered(p, req.Term, req.LeaderCommitIndex, false)
		}
	}
}

// openPipe opens p's pipeline (past trackedTransport, whose pipeline raft
// may not use) and starts reading its answers.
func (c *noticer) openPipe(p *noticePeer) (*noticePipe, error) {
	ap, err := c.node.trans.(*trackedTransport).NetworkTransport.AppendEntriesPipeline(p.id, p.addr)
	if err != nil {
		return nil, err
	}
	pipe := &noticePipe{AppendPipeline: ap, done: make(chan struct{})}
	c.mu.Lock()
	if c.ctx.Err() != nil {
		c.mu.Unlock()
		pipe.close()
		return nil, c.ctx.Err()
	}
	p.pipe = pipe
	c.mu.Unlock()
	go c.answers(p, pipe)
	return pipe, nil
}

// answers counts the notices pipe's member accepted, until the pipeline
// fails or is closed: the leader's own, follower notices and relayed ones
// apart (the last two speak for the leader; of those, relays alone go to
// non-voters).
func (c *noticer) answers(p *noticePeer, pipe *noticePipe) {
	for {
		select {
		case <-pipe.done:
			return
		case f := <-pipe.Consumer():
			req := f.Request()
			own := string(req.ID) == c.node.id
			if f.Error() != nil {
				c.dropPipe(p, pipe)
				if own {
					c.answered(p, req.Term, req.LeaderCommitIndex, false)
				}
				return
			}
			if own && !c.retryNotice(p, req, f.Response()) {
				c.answered(p, req.Term, req.LeaderCommitIndex, f.Response().Success)
			}
			if !f.Response().Success {
				continue
			}
			switch {
			case own:
				c.node.metrics.notices.Inc()
			case p.nonVoter.Load():
				c.node.metrics.relayedNotices.Inc()
			default:
				c.node.metrics.followerNotices.Inc()
			}
		}
	}
}

// retryNotice sends p this node's notice req again, carrying the entries
// after the follower's last (resp.LastLog), when p refused it for lacking
// the entry it starts from and req carried no entries (raft's request in
// flight carried them, and the notice was read first). It reports whether
// a later answer counts instead of this one: the retry's, or that of a
// newer notice already wanted.
func (c *noticer) retryNotice(p *noticePeer, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	if !lacksNoticedEntry(req, resp) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.term != req.Term || p.stored != nil || p.want < req.LeaderCommitIndex {
		return false
	}
	if p.want > req.LeaderCommitIndex {
		return true // a newer notice follows; its answer counts
	}
	p.retryFrom, p.sent = resp.LastLog, 0
	c.start(p)
	return true
}

// lacksNoticedEntry reports whether resp refuses req, a notice carrying
// no entries, because the follower's log ends before the entry req starts
// from (in req's term; a follower in a newer term refuses by its term).
func lacksNoticedEntry(req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) bool {
	return !resp.Success && len(req.Entries) == 0 && resp.Term == req.Term && resp.LastLog > 0 && resp.LastLog < req.PrevLogEntry
}

// answered records that p accepted (ok) or refused, or could not be sent,
// this node's notice of commit in term, and wakes awaitAccepted.
func (c *noticer) answered(p *noticePeer, term, commit uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		p.accepted.raise(term, commit)
	} else {
		p.failed.raise(term, commit)
	}
	if c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

// noticeOutcome is how awaitAccepted ended.
type noticeOutcome int

const (
	// noticesAccepted: every member accepted the commit index or a
	// higher one; none needs a barrier.
	noticesAccepted noticeOutcome = iota
	// noticesFailed: a member refused, or could not be sent, a notice of
	// it (or of a higher one), or did not answer within the wait.
	noticesFailed
	// noticesInterrupted: a new commit came first.
	noticesInterrupted
)

// awaitAccepted waits until each of members has accepted this node's
// notice of commit in term (or of a later commit), until one of them has
// refused it or could not be sent it, for at most wait, or until
// interrupt receives or ctx ends.
func (c *noticer) awaitAccepted(ctx context.Context, term, commit uint64, members []raft.ServerID, wait time.Duration, interrupt <-chan struct{}) noticeOutcome {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		c.mu.Lock()
		all, failed := true, false
		for _, id := range members {
			p := c.peers[id]
			switch {
			case p == nil:
				all = false
			case p.accepted.covers(term, commit):
			default:
				all = false
				failed = failed || p.failed.covers(term, commit)
			}
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		changed := c.changed
		c.mu.Unlock()
		switch {
		case all:
			return noticesAccepted
		case failed:
			return noticesFailed
		}
		select {
		case <-changed:
		case <-timer.C:
			return noticesFailed
		case <-ctx.Done():
			return noticesFailed
		case <-interrupt:
			return noticesInterrupted
		}
	}
}

// dropPipe closes pipe, p's pipeline until it failed: the next notice
// opens another.
func (c *noticer) dropPipe(p *noticePeer, pipe *noticePipe) {
	c.mu.Lock()
	if p.pipe == pipe {
		p.pipe = nil
	}
	c.mu.Unlock()
	pipe.close()
}

// close closes every pipeline; the node has stopped (ctx ended).
func (c *noticer) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.peers {
		if p.pipe != nil {
			p.pipe.close()
			p.pipe = nil
		}
	}
}
