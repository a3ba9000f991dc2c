package raftnode

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Distances: how a voter decides which non-voters are near it, for its
// relayed commit notices (relay.go).
//
// A member is not told its region: locality is the addresses clients are
// given, and voters spread by a scheduler cannot be told theirs. So a
// voter measures. While it follows in a group where followers learn of
// commits early, and the configuration has non-voters, it times round
// trips to the leader and, when the leader is far, to every other member,
// every distanceEvery and whenever the leader or the configuration
// changes; and relays to the non-voters whose round trip is at most a
// quarter of the leader's. That is a non-voter in its own region (or
// zone) while the leader is regions away: there a relay gains the
// leader's whole distance. The leader far means over relayFarRTT: nearer,
// a relay would gain less than the extra hop it costs. It times the other
// voters too: of the voters of one region, only the one with the lowest
// id relays, as each would gain the same.

const (
	// distanceEvery is how often a voter measures again while nothing
	// changes; distanceRetry, while it has no leader or a round trip
	// failed.
	distanceEvery = 10 * time.Second
	distanceRetry = time.Second
	// distanceSamples is how many round trips a distance is the least
	// of: the first may open a connection, and a busy machine delays
	// some.
	distanceSamples = 3
	// relayFarRTT is the round trip to the leader below which a voter
	// relays to nobody.
	relayFarRTT = 2 * time.Millisecond
	// relayNearShare: a non-voter is near when its round trip is at
	// most the leader's divided by this.
	relayNearShare = 4
)

// measureDistances keeps n.relays.plan up to date until ctx ends.
func (n *Node) measureDistances(ctx context.Context) {
	t := time.NewTimer(distanceRetry)
	defer t.Stop()
	var last *relayPlan
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.relays.remeasure:
		}
		plan, settled := n.planRelays()
		n.relays.plan.Store(plan)
		if !samePlan(plan, last) && (plan != nil && len(plan.to) > 0 || last != nil && len(last.to) > 0) {
			ids := []raft.ServerID{}
			if plan != nil {
				for _, s := range plan.to {
					ids = append(ids, s.ID)
				}
			}
			n.log.Info("relaying commits to the non-voters near this voter", "id", n.id, "to", ids)
		}
		last = plan
		if settled {
			t.Reset(distanceEvery)
		} else {
			t.Reset(distanceRetry)
		}
	}
}

func samePlan(a, b *relayPlan) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.leader == b.leader && slices.Equal(a.to, b.to)
}

// planRelays measures what relayTargets needs and returns the plan; it
// reports whether the plan is settled (false: measure again soon).
func (n *Node) planRelays() (*relayPlan, bool) {
	switch n.raft.State() {
	case raft.Follower:
	case raft.Leader:
		return nil, true
	default:
		return nil, false
	}
	addr, leader := n.raft.LeaderWithID()
	if leader == "" {
		return nil, false
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, false
	}
	self := raft.ServerID(n.id)
	conf := f.Configuration()
	if len(relayCandidates(conf, leader, self)) == 0 {
		return &relayPlan{leader: leader}, true
	}
	rtt := map[raft.ServerID]time.Duration{}
	d, err := n.roundTrip(leader, addr)
	if err != nil {
		return nil, false
	}
	rtt[leader] = d
	if d >= relayFarRTT {
		for _, s := range conf.Servers {
			if s.ID == self || s.ID == leader {
				continue
			}
			if d, err := n.roundTrip(s.ID, s.Address); err == nil {
				rtt[s.ID] = d
			}
		}
	}
	return &relayPlan{leader: leader, to: relayTargets(conf, leader, self, rtt)}, true
}

// relayCandidates are the non-voters of conf that self, a voter following
// leader, may relay commits to: all of them when a follower can learn of
// a commit before the leader (another follower's notice completes a
// majority with self, noticeCommits), none otherwise.
func relayCandidates(conf raft.Configuration, leader, self raft.ServerID) []raft.Server {
	early := false
	for _, s := range conf.Servers {
		if s.ID != self && s.ID != leader && noticeCommits(conf, leader, s.ID, self) {
			early = true
		}
	}
	if !early {
		return nil
	}
	var to []raft.Server
	for _, s := range conf.Servers {
		if s.Suffrage != raft.Voter && s.ID != self && s.ID != leader {
			to = append(to, s)
		}
	}
	return to
}

// relayTargets are the non-voters self, a voter following leader, relays
// commits to, by the round trips it measured (rtt; a member not measured
// is not near): of relayCandidates, those near it while the leader is
// far, unless another voter near it, other than the leader, has a lower
// id. That voter is in the same region, learns of commits as early, and
// relays for both; if it stops answering, the next measurement finds it
// not near. Far is a round trip to the leader of at least relayFarRTT,
// near one of at most the leader's over relayNearShare.
func relayTargets(conf raft.Configuration, leader, self raft.ServerID, rtt map[raft.ServerID]time.Duration) []raft.Server {
	far, ok := rtt[leader]
	if !ok || far < relayFarRTT {
		return nil
	}
	near := func(id raft.ServerID) bool {
		d, ok := rtt[id]
		return ok && d*relayNearShare <= far
	}
	for _, s := range conf.Servers {
		if s.Suffrage == raft.Voter && s.ID != leader && s.ID < self && near(s.ID) {
			return nil
		}
	}
	var to []raft.Server
	for _, s := range relayCandidates(conf, leader, self) {
		if near(s.ID) {
			to = append(to, s)
		}
	}
	return to
}

// roundTrip is the least of distanceSamples round trips to member id at
// addr. Each is an AppendEntries of term 0 with an empty header, which a
// member refuses without reading further once it has a term (from its
// first contact with a leader). One without (a member just added, that
// no leader reached yet) accepts it as from no leader, which it already
// has: it changes nothing there but its last contact, which only an
// election timer reads, and a voter pings only the leader.
func (n *Node) roundTrip(id raft.ServerID, addr raft.ServerAddress) (time.Duration, error) {
	t := n.trans.(*trackedTransport)
	var least time.Duration
	for i := range distanceSamples {
		req := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax}}
		start := time.Now()
		if err := t.NetworkTransport.AppendEntries(id, addr, req, new(raft.AppendEntriesResponse)); err != nil {
			return 0, err
		}
		if d := time.Since(start); i == 0 || d < least {
			least = d
		}
	}
	return least, nil
}
