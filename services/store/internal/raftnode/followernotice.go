package raftnode

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Follower commit notices: a follower tells others of a commit the leader
// has not heard of yet.
//
// An entry is committed once the leader that made it has it stored on a
// majority of the voters (the Raft paper, §5.4.2): whoever holds it then,
// any later leader holds it too. The leader learns it when the answers come
// back, and tells the others with its own commit notices (notice.go), so a
// member one region away learns of a commit a round trip to the nearest
// quorum plus half a round trip after the leader wrote the entry. But the
// members can tell earlier. A voter that has just stored, as a follower, an
// entry of the leader's current term knows that two voters hold it, the
// leader (raft's leader writes its log before it replicates) and itself; a
// third member that holds it as well makes three. So when the leader's
// copy, the follower's and the receiver's are a majority of the voters, the
// follower sends the receiver a commit notice of its own: the AppendEntries
// the leader would send it, carrying the entries the follower just stored
// (the leader's, by log matching) and committing the last. The receiver's
// raft checks it like the leader's: it accepts it only if its log matches
// the leader's up to the entry before those carried, stores what it lacks
// (durably, before it applies) and applies up to the commit index; so when
// it applies, it holds the entry itself and the count was true.
//
// A follower sends them only where the receiver's copy completes the
// majority: where the leader's copy and its own already are one, the
// leader learns of the commit from its answer, one hop later, and tells
// everyone itself, and notices from every follower would only double the
// messages of each write. So with three voters there are none; with five
// (2+2+1 over three regions), the voter beside the leader tells the voters
// of the other regions, which hold the entry half a round trip after the
// leader wrote it and apply it then, half a round trip before the leader
// itself learns of the commit. Non-voters learn of it from the leader.
// With seven or more, three copies are never a majority, and only the
// leader tells.
//
// The count uses the configuration in effect at the entry (the follower's
// latest, when no configuration entry follows it): raft counts a commit by
// the voters of its latest configuration, and one member changes at a time,
// so any majority of the next configuration meets any of this one.
//
// Like the leader's, these notices go once per pause in the writes (a
// command stored more than sparseGap after the previous one): under a
// steady stream raft's own AppendEntries carry the commit index. The
// notice speaks for the leader (its header names the leader, in the
// leader's term); a receiver in a newer term refuses it, and one that lacks
// the entry before those carried refuses it without changing anything.

// noticingLogStore is raft's log store as raft drives it: once it has
// stored a batch holding a lone command, it hands the batch to the node
// (Node.noticeStored): a follower's to its follower notices, the leader's
// to its notices at the acknowledgement (acknotice.go).
type noticingLogStore struct {
	raft.LogStore
	// node is set once the Node exists; until then nothing is noticed.
	node atomic.Pointer[Node]
	// lastCommand is when StoreLogs last stored a command (zero for
	// never). Only raft's main goroutine stores logs once raft runs.
	lastCommand time.Time
}

// StoreLog stores one entry (see StoreLogs).
func (s *noticingLogStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores logs; when they hold a command stored more than
// sparseGap after the previous one, the node notices them once they are
// stored.
func (s *noticingLogStore) StoreLogs(logs []*raft.Log) error {
	if err := s.LogStore.StoreLogs(logs); err != nil {
		return err
	}
	n := s.node.Load()
	if n != nil && slices.ContainsFunc(logs, isConfiguration) {
		n.stored.none.Store(0) // the receivers may have changed
		signal(n.relays.remeasure)
	}
	if n != nil && slices.ContainsFunc(logs, isCommand) {
		now := time.Now()
		if !closeTogether(s.lastCommand, now) {
			n.noticeStored(logs)
		}
		s.lastCommand = now
	}
	return nil
}

// followerBatch is a batch of entries this node holds as a follower, and
// the leader and term its notices speak for.
type followerBatch struct {
	logs       []*raft.Log
	term       uint64
	leaderID   raft.ServerID
	leaderAddr raft.ServerAddress
}

// last is the index of the batch's last entry, which its notices commit.
func (b *followerBatch) last() uint64 { return b.logs[len(b.logs)-1].Index }

// noticeStored takes logs, just stored and holding a lone command: the
// leader's are noticed at their acknowledgement (appendedLone); a
// follower's go to its follower notices (storedAsFollower).
func (n *Node) noticeStored(logs []*raft.Log) {
	switch n.raft.State() {
	case raft.Leader:
		n.appendedLone(logs)
	case raft.Follower:
		n.storedAsFollower(logs)
	}
}

// storedAsFollower hands logs, just stored as a follower, to the follower
// notices when the last of them is of the current term (an earlier term's
// entry is committed only by one of the current term after it). It runs
// on raft's main goroutine, inside the AppendEntries that carried logs,
// so it only hands them on (followerNotices sends).
func (n *Node) storedAsFollower(logs []*raft.Log) {
	if !n.stored.mayNotice(time.Now()) {
		return
	}
	term := n.raft.CurrentTerm()
	if logs[len(logs)-1].Term != term {
		return
	}
	addr, id := n.raft.LeaderWithID()
	if id == "" {
		return
	}
	n.stored.put(&followerBatch{logs: logs, term: term, leaderID: id, leaderAddr: addr})
}

// batchQueue holds the newest batch handed on and not yet sent: a newer
// one replaces it, as its notices commit everything the older one's did.
type batchQueue struct {
	mu     sync.Mutex
	batch  *followerBatch
	signal chan struct{} // capacity 1
}

func newBatchQueue() batchQueue { return batchQueue{signal: make(chan struct{}, 1)} }

func (q *batchQueue) put(b *followerBatch) {
	q.mu.Lock()
	q.batch = b
	q.mu.Unlock()
	signal(q.signal)
}

func (q *batchQueue) take() *followerBatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.batch
	q.batch = nil
	return b
}

// storedQueue holds the batch the log store last handed on for follower
// notices.
type storedQueue struct {
	batchQueue

	// none is when followerNotices last found, in the configuration,
	// no member this node would tell of a commit (Unix nanoseconds; zero
	// when it found one, or has not looked). Until noneFor after that,
	// batches are not handed on: asking raft for the configuration for
	// each write would cost every lone write a round on raft's main
	// goroutine, in groups (three voters, seven) that never send one.
	none atomic.Int64
}

// noneFor is how long a configuration without receivers is trusted
// before it is asked for again. A configuration entry stored meanwhile
// ends it at once; one installed with a snapshot, after noneFor.
const noneFor = 5 * time.Second

func newStoredQueue() *storedQueue { return &storedQueue{batchQueue: newBatchQueue()} }

// mayNotice reports whether a batch stored at now should be handed on:
// not while the configuration last seen had no receivers (none, reset
// when a configuration entry is stored). Skipping is only ever a notice
// not sent; what is sent is checked against the configuration asked for
// then.
func (q *storedQueue) mayNotice(now time.Time) bool {
	none := q.none.Load()
	return none == 0 || now.UnixNano()-none > int64(noneFor)
}

func isConfiguration(l *raft.Log) bool { return l.Type == raft.LogConfiguration }

// followerNotices sends the follower notices of each batch noticeStored
// hands on, until the node stops (the noticer's context ends).
func (n *Node) followerNotices() {
	c := &n.notices
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-n.stored.signal:
		}
		b := n.stored.take()
		if b == nil {
			continue
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil || f.Index() > b.last() {
			// A configuration entry after the batch's last: the
			// voters that count for it are not the latest ones.
			continue
		}
		to := n.storedReceivers(f.Configuration(), b.leaderID)
		if len(to) == 0 {
			n.stored.none.Store(time.Now().UnixNano())
			continue
		}
		n.stored.none.Store(0)
		c.notifyAsFollower(to, n.followerNoticeRequest(b))
	}
}

// noticeCommits reports whether self, a voter, should tell to that an
// entry self has stored is committed: when the leader's copy and self's
// are not a majority of conf's voters, and with to's they are. When they
// already are, the leader knows of the commit one hop after self does,
// from self's answer, and tells to itself: a notice from self would gain
// that hop and cost every member a message per write. A non-voter sends
// none: its copy does not count.
func noticeCommits(conf raft.Configuration, leader, self, to raft.ServerID) bool {
	voters, pair, selfVotes, toVotes := 0, 0, false, false
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		selfVotes = selfVotes || s.ID == self
		toVotes = toVotes || s.ID == to
		if s.ID == leader || s.ID == self {
			pair++
		}
	}
	if !selfVotes || !toVotes || pair > voters/2 {
		return false
	}
	return pair+1 > voters/2
}

// storedReceivers is every member of conf but leader and this node for
// which noticeCommits holds: those this node tells of a commit it stored.
// There are none without a network transport (a single member).
func (n *Node) storedReceivers(conf raft.Configuration, leader raft.ServerID) []raft.Server {
	if _, tracked := n.trans.(*trackedTransport); !tracked {
		return nil
	}
	self := raft.ServerID(n.id)
	var to []raft.Server
	for _, s := range conf.Servers {
		if s.ID != self && s.ID != leader && noticeCommits(conf, leader, self, s.ID) {
			to = append(to, s)
		}
	}
	return to
}

// notifyAsFollower sends req, a notice this node sends as a follower in
// the leader's name (followerNoticeRequest), to each of to that has not
// been sent a newer one. It never blocks on the network.
func (c *noticer) notifyAsFollower(to []raft.Server, req *raft.AppendEntriesRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range to {
		p := c.peer(s)
		if req.LeaderCommitIndex <= p.want && req.Term == p.term {
			continue
		}
		p.want, p.term, p.stored = req.LeaderCommitIndex, req.Term, req
		c.start(p)
	}
}

// maxFollowerNoticeBytes bounds the data a follower notice carries: a
// larger batch's notice carries no entries, and a receiver that has not
// stored them yet refuses it (it learns of the commit from the leader).
const maxFollowerNoticeBytes = 64 << 10

// followerNoticeRequest is the notice of b, built once for all its
// receivers: the AppendEntries b's leader would send, with b's entries
// (consecutive, as the log store is handed them) after the one before
// them, and the last committed. Without the entry before them (compacted
// away) or when they are too large, it carries none and starts from the
// last.
func (n *Node) followerNoticeRequest(b *followerBatch) *raft.AppendEntriesRequest {
	leader := n.trans.EncodePeer(b.leaderID, b.leaderAddr)
	last := b.logs[len(b.logs)-1]
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(b.leaderID), Addr: leader},
		Term:              b.term,
		Leader:            leader,
		PrevLogEntry:      last.Index,
		PrevLogTerm:       last.Term,
		LeaderCommitIndex: last.Index,
	}
	size := 0
	for _, l := range b.logs {
		size += len(l.Data) + len(l.Extensions)
	}
	if size > maxFollowerNoticeBytes {
		return req
	}
	prev := raft.Log{}
	if first := b.logs[0].Index; first > 1 {
		if err := n.logs.GetLog(first-1, &prev); err != nil {
			return req
		}
	}
	req.PrevLogEntry, req.PrevLogTerm, req.Entries = prev.Index, prev.Term, b.logs
	return req
}
