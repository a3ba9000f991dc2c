package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

const cliUsage = `usage: store <command> [flags]

  store member list
  store member add <id> <peer-ip:port> [<client-host:port>] [--non-voter]
  store member remove <id>
  store member promote <id>
  store leader transfer [<id>]
  store status
  store snapshot save <file>
  store snapshot restore <file> --data-dir <dir>   (offline: no member is contacted)

flags: --endpoints host:port,… (default 127.0.0.1:2479) --cert --key --cacert --timeout

Every command but snapshot restore needs an operator's client certificate
(--cert/--key, O=meridian:operators) signed by the store's internal CA
(--cacert verifies the members).
`

// isCLICommand reports whether the first argument selects the admin CLI
// rather than running a member.
func isCLICommand(arg string) bool {
	switch arg {
	case "member", "leader", "status", "snapshot":
		return true
	}
	return false
}

// runCLI runs an admin command against the cluster and returns the exit
// code.
func runCLI(args []string, stdout, stderr io.Writer) int {
	if err := cli(args, stdout); err != nil {
		fmt.Fprintln(stderr, "store:", err)
		if errors.Is(err, errUsage) {
			fmt.Fprint(stderr, cliUsage)
			return 2
		}
		return 1
	}
	return 0
}

var errUsage = errors.New("bad usage")

func cli(args []string, out io.Writer) error {
	cmd := args[0]
	args = args[1:]
	sub := ""
	if cmd != "status" {
		if len(args) == 0 {
			return errUsage
		}
		sub, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("store "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	endpoints := fs.String("endpoints", "127.0.0.1:2479", "comma-separated gRPC addresses of members")
	cert := fs.String("cert", "", "operator client certificate (PEM, O=meridian:operators)")
	key := fs.String("key", "", "client key (PEM)")
	ca := fs.String("cacert", "", "CA bundle (PEM) verifying the members")
	timeout := fs.Duration("timeout", 30*time.Second, "bound on the command")
	nonVoter := fs.Bool("non-voter", false, "member add: add a non-voting replica")
	dataDir := fs.String("data-dir", "", "snapshot restore: the new member's data directory")
	// Flags may follow positional arguments.
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		args = fs.Args()
		if len(args) > 0 {
			pos = append(pos, args[0])
			args = args[1:]
		}
	}
	if cmd+" "+sub == "snapshot restore" {
		if len(pos) != 1 || *dataDir == "" {
			return errUsage
		}
		return restoreSnapshot(pos[0], *dataDir, out)
	}
	var tlsCfg *tls.Config
	if *cert != "" || *ca != "" {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		if *cert != "" {
			c, err := tls.LoadX509KeyPair(*cert, *key)
			if err != nil {
				return err
			}
			tlsCfg.Certificates = []tls.Certificate{c}
		}
		if *ca != "" {
			pool, err := loadPool(*ca)
			if err != nil {
				return err
			}
			tlsCfg.RootCAs = pool
		}
	}
	c, err := client.Dial(strings.Split(*endpoints, ","), tlsCfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	var members []*storev1.Member
	switch cmd + " " + sub {
	case "status ":
		st, err := c.Maintenance().Status(ctx, &storev1.StatusRequest{})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "member %s leader %s state %s term %d applied %d commit %d revision %d db %d bytes voter %t\n",
			st.GetMemberId(), st.GetLeaderId(), st.GetRaftState(), st.GetRaftTerm(), st.GetAppliedIndex(),
			st.GetCommitIndex(), st.GetHeader().GetRevision(), st.GetDbSizeBytes(), st.GetVoter())
		return nil
	case "member list":
		r, err := c.Cluster().MemberList(ctx, &storev1.MemberListRequest{})
		if err != nil {
			return err
		}
		members = r.GetMembers()
	case "member add":
		if len(pos) < 2 || len(pos) > 3 {
			return errUsage
		}
		req := &storev1.MemberAddRequest{Id: pos[0], PeerAddress: pos[1], NonVoter: *nonVoter}
		if len(pos) == 3 {
			req.ClientAddress = pos[2]
		}
		r, err := c.Cluster().MemberAdd(ctx, req)
		if err != nil {
			return err
		}
		members = r.GetMembers()
	case "member remove":
		if len(pos) != 1 {
			return errUsage
		}
		r, err := c.Cluster().MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: pos[0]})
		if err != nil {
			return err
		}
		members = r.GetMembers()
	case "member promote":
		if len(pos) != 1 {
			return errUsage
		}
		r, err := c.Cluster().MemberPromote(ctx, &storev1.MemberPromoteRequest{Id: pos[0]})
		if err != nil {
			return err
		}
		members = r.GetMembers()
	case "snapshot save":
		if len(pos) != 1 {
			return errUsage
		}
		return saveSnapshot(ctx, c.Maintenance(), pos[0], out)
	case "leader transfer":
		if len(pos) > 1 {
			return errUsage
		}
		req := &storev1.TransferLeadershipRequest{}
		if len(pos) == 1 {
			req.Id = pos[0]
		}
		r, err := c.Cluster().TransferLeadership(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "leader %s\n", r.GetLeaderId())
		return nil
	default:
		return errUsage
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPEER\tCLIENT\tVOTER\tLEADER")
	for _, m := range members {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%t\n", m.GetId(), m.GetPeerAddress(), m.GetClientAddress(), m.GetVoter(), m.GetLeader())
	}
	return tw.Flush()
}
