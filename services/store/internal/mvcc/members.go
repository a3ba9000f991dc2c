package mvcc

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// # Membership keyspace
//
// The client (gRPC) address of each member is replicated through raft so
// that every member can forward requests to the leader and list members
// with their client addresses. The raft configuration itself carries only
// server ids and peer addresses.
//
//	"s/n/" | raft server id → client address ("host:port")
//
// The keyspace is under "s/", so snapshots carry it and restores replace
// it; it has no revision and produces no watch event.
var (
	memberPrefix = []byte("s/n/")
	memberEnd    = []byte("s/o")
)

func memberKey(id string) []byte { return append(append([]byte{}, memberPrefix...), id...) }

// SetMember records the client address of member id in the batch; an
// empty address deletes the record.
func (w *WriteBatch) SetMember(id, clientAddr string) error {
	if id == "" {
		return fmt.Errorf("%w: empty member id", ErrInvalidArgument)
	}
	var err error
	if clientAddr == "" {
		err = w.b.Delete(memberKey(id), nil)
	} else {
		err = w.b.Set(memberKey(id), []byte(clientAddr), nil)
	}
	if err != nil {
		return fmt.Errorf("mvcc: batch set member: %w", err)
	}
	return nil
}

// Members returns the committed client address of every member with one.
func (s *Store) Members() (map[string]string, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: memberPrefix, UpperBound: memberEnd})
	if err != nil {
		return nil, fmt.Errorf("mvcc: open member iterator: %w", err)
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key()[len(memberPrefix):])] = string(it.Value())
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("mvcc: scan members: %w", err)
	}
	return out, nil
}
