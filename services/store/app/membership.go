package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// registerInterval is how often a member checks that the membership
// keyspace holds its client address (and, on the leader, those of the
// initial cluster).
const registerInterval = 2 * time.Second

// join asks the members of cfg.Join to add this member, retrying (bounded
// by ctx) until one accepts: any member forwards MemberAdd to the leader.
func (a *App) join(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if a.cfg.ClientTLS != nil {
		creds = credentials.NewTLS(a.cfg.ClientTLS)
	}
	req := &storev1.MemberAddRequest{
		Id: a.cfg.ID, PeerAddress: cmp.Or(a.cfg.PeerAdvertise, a.cfg.PeerAddress), ClientAddress: a.cfg.ClientAddress, NonVoter: a.cfg.NonVoter,
	}
	var errs []error
	for attempt := 0; ; attempt++ {
		for _, ep := range a.cfg.Join {
			err := func() error {
				conn, err := grpc.NewClient(ep, grpc.WithTransportCredentials(creds))
				if err != nil {
					return err
				}
				defer conn.Close()
				cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				defer cancel()
				_, err = storev1.NewClusterServiceClient(conn).MemberAdd(cctx, req)
				return err
			}()
			if err == nil {
				a.log.Info("joined the cluster", "via", ep, "voter", !a.cfg.NonVoter)
				return nil
			}
			errs = append(errs[max(0, len(errs)-4):], fmt.Errorf("%s: %w", ep, err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: joining via %v: %w", a.cfg.Join, errors.Join(append(errs, ctx.Err())...))
		case <-time.After(min(time.Duration(attempt+1)*200*time.Millisecond, 2*time.Second)):
		}
	}
}

// registerAddresses keeps the membership keyspace current: this member's
// client address (through MemberAdd of itself, which the leader turns into
// a client-address update), and on the leader the client addresses given
// in the initial cluster.
func (a *App) registerAddresses(ctx context.Context) {
	t := time.NewTicker(registerInterval)
	defer t.Stop()
	for {
		a.registerOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *App) registerOnce(ctx context.Context) {
	ms, err := a.store.Members()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if a.cfg.ClientAddress != "" && ms[a.cfg.ID] != a.cfg.ClientAddress && a.node.LeaderID() != "" {
		ctx := metadata.NewIncomingContext(ctx, metadata.Pairs(wire.AddressOnlyKey, "1"))
		_, err := a.srv.Cluster().MemberAdd(ctx, &storev1.MemberAddRequest{
			Id: a.cfg.ID, PeerAddress: cmp.Or(a.cfg.PeerAdvertise, a.cfg.PeerAddress), ClientAddress: a.cfg.ClientAddress,
		})
		if err != nil {
			a.log.Debug("registering the client address", "error", err)
		}
	}
	if !a.node.IsLeader() {
		return
	}
	for _, m := range a.cfg.InitialCluster {
		if m.ClientAddress != "" && ms[m.ID] == "" {
			if err := a.node.SetClientAddress(ctx, m.ID, m.ClientAddress); err != nil {
				a.log.Debug("recording an initial member's client address", "member", m.ID, "error", err)
			}
		}
	}
}
