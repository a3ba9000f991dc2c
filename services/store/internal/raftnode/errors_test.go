package raftnode

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// TestMapErr: raft's errors become the node's, and only those raft
// returns before appending are marked not proposed (safe to retry, even a
// write); the original stays in the chain, wrapped or not.
func TestMapErr(t *testing.T) {
	other := errors.New("disk on fire")
	for _, c := range []struct {
		in          error
		want        error // nil: returned as it is
		notProposed bool
	}{
		{raft.ErrNotLeader, ErrNotLeader, true},
		{raft.ErrLeadershipTransferInProgress, ErrNotLeader, true},
		{raft.ErrNotVoter, ErrNotLeader, true},
		{raft.ErrEnqueueTimeout, ErrTimeout, true},
		{raft.ErrLeadershipLost, ErrNotLeader, false},
		{raft.ErrRaftShutdown, ErrStopped, false},
		{other, nil, false},
		{context.DeadlineExceeded, nil, false},
	} {
		for _, in := range []error{c.in, fmt.Errorf("while applying: %w", c.in)} {
			got := mapErr(in)
			if !errors.Is(got, c.in) {
				t.Errorf("mapErr(%v) = %v: lost the original", in, got)
			}
			if c.want == nil {
				if got != in {
					t.Errorf("mapErr(%v) = %v, want it unchanged", in, got)
				}
				continue
			}
			if !errors.Is(got, c.want) {
				t.Errorf("mapErr(%v) = %v, want %v", in, got, c.want)
			}
			if errors.Is(got, ErrNotProposed) != c.notProposed {
				t.Errorf("mapErr(%v) = %v: not proposed %v, want %v", in, got, !c.notProposed, c.notProposed)
			}
		}
	}
}
