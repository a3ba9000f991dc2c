package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// A command is one admin command of the store binary: its words, the
// positional arguments it takes, its own flags and what it does.
type command struct {
	// name is the command's words, "member add".
	name string
	// args are its positional arguments in usage form; optional ones are
	// in brackets and come last: "<id>", "[<client-host:port>]".
	args []string
	// about says what it does, for the usage.
	about string
	// offline commands contact no member: they take no connection flags
	// and run gets a nil client.
	offline bool
	// flags defines the command's own flags, storing them in inv.
	flags func(fs *flag.FlagSet, inv *invocation)
	// check reports what the parsed flags lack, as a usage error message;
	// "" when nothing.
	check func(inv *invocation) string
	// run runs the command; ctx is bounded by --timeout for online
	// commands.
	run func(ctx context.Context, c *client.Client, inv *invocation, out io.Writer) error
}

// commands returns the store's admin commands, in the order the usage
// lists them.
func commands() []*command {
	return []*command{
		{
			name:  "member list",
			about: "list the members: id, raft address, client address, voter, leader",
			run: func(ctx context.Context, c *client.Client, _ *invocation, out io.Writer) error {
				r, err := c.Cluster().MemberList(ctx, &storev1.MemberListRequest{})
				if err != nil {
					return err
				}
				return printMembers(out, r.GetMembers())
			},
		},
		{
			name:  "member add",
			args:  []string{"<id>", "<peer-ip:port>", "[<client-host:port>]"},
			about: "add a member by its raft address and its gRPC address (which others forward to); then start it with --join",
			flags: func(fs *flag.FlagSet, inv *invocation) {
				fs.BoolVar(&inv.nonVoter, "non-voter", false, "add a non-voting replica (promote it later with member promote)")
			},
			run: func(ctx context.Context, c *client.Client, inv *invocation, out io.Writer) error {
				req := &storev1.MemberAddRequest{Id: inv.args[0], PeerAddress: inv.args[1], NonVoter: inv.nonVoter}
				if len(inv.args) == 3 {
					req.ClientAddress = inv.args[2]
				}
				r, err := c.Cluster().MemberAdd(ctx, req)
				if err != nil {
					return err
				}
				return printMembers(out, r.GetMembers())
			},
		},
		{
			name:  "member remove",
			args:  []string{"<id>"},
			about: "remove a member from the raft configuration",
			run: func(ctx context.Context, c *client.Client, inv *invocation, out io.Writer) error {
				r, err := c.Cluster().MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: inv.args[0]})
				if err != nil {
					return err
				}
				return printMembers(out, r.GetMembers())
			},
		},
		{
			name:  "member promote",
			args:  []string{"<id>"},
			about: "make a non-voting member a voter",
			run: func(ctx context.Context, c *client.Client, inv *invocation, out io.Writer) error {
				r, err := c.Cluster().MemberPromote(ctx, &storev1.MemberPromoteRequest{Id: inv.args[0]})
				if err != nil {
					return err
				}
				return printMembers(out, r.GetMembers())
			},
		},
		{
			name:  "leader transfer",
			args:  []string{"[<id>]"},
			about: "hand leadership to voter <id>, or to the most up-to-date voter; prints the new leader",
			run: func(ctx context.Context, c *client.Client, inv *invocation, out io.Writer) error {
				req := &storev1.TransferLeadershipRequest{}
				if len(inv.args) == 1 {
					req.Id = inv.args[0]
				}
				r, err := c.Cluster().TransferLeadership(ctx, req)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "leader %s\n", r.GetLeaderId())
				return err
			},
		},
		{
			name:  "status",
			about: "show the reached member's (the leader's when it can) raft state, term, indexes, revision, DB size",
			run: func(ctx context.Context, c *client.Client, _ *invocation, out io.Writer) error {
				st, err := c.Maintenance().Status(ctx, &storev1.StatusRequest{})
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(out, "member %s leader %s state %s term %d applied %d commit %d revision %d db %d bytes voter %t\n",
					st.GetMemberId(), st.GetLeaderId(), st.GetRaftState(), st.GetRaftTerm(), st.GetAppliedIndex(),
					st.GetCommitIndex(), st.GetHeader().GetRevision(), st.GetDbSizeBytes(), st.GetVoter())
				return err
			},
		},
		{
			name:  "snapshot save",
			args:  []string{"<file>"},
			about: "stream a backup of a member's state into <file> (written to <file>.part, verified, then renamed)",
			run: func(ctx context.Context, c *client.Client, inv *invocation, out io.Writer) error {
				return saveSnapshot(ctx, c.Maintenance(), inv.args[0], out)
			},
		},
		{
			name:    "snapshot restore",
			args:    []string{"<file>"},
			about:   "build a new data directory from a backup, offline: contacts no member",
			offline: true,
			flags: func(fs *flag.FlagSet, inv *invocation) {
				fs.StringVar(&inv.dataDir, "data-dir", "", "the new member's data directory (required; must not hold a store)")
				fs.BoolVar(&inv.skipPresent, "skip-if-present", false, "when --data-dir already holds a store, leave it and succeed (for an init container that runs at every start)")
			},
			check: func(inv *invocation) string {
				if inv.dataDir == "" {
					return "--data-dir is required"
				}
				return ""
			},
			run: func(_ context.Context, _ *client.Client, inv *invocation, out io.Writer) error {
				return restoreSnapshot(inv.args[0], inv.dataDir, inv.skipPresent, out)
			},
		},
	}
}

// printMembers writes members as a table.
func printMembers(out io.Writer, members []*storev1.Member) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPEER\tCLIENT\tVOTER\tLEADER")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%t\n", m.GetId(), m.GetPeerAddress(), m.GetClientAddress(), m.GetVoter(), m.GetLeader())
	}
	return tw.Flush()
}
