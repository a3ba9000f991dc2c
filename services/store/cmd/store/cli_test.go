package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// runCommandLine runs a command line as main does and returns the exit code (-1
// when it would run a member) and what it printed.
func runCommandLine(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	_, code, serve := commandLine(args, &out, &errOut)
	if serve {
		code = -1
	}
	return code, out.String(), errOut.String()
}

// serveTLS starts a single-member store serving mutual TLS with the
// certificates of p and returns its address.
func serveTLS(t *testing.T, p *testPKI) string {
	t.Helper()
	return storetest.Start(t, app.Config{CompactionRetention: -1, TLS: p.serverTLS()}).Addr
}

// TestFlagsBeforeOrAfterTheCommand: the connection flags (endpoints, TLS,
// timeout) work before the command's words, between them and after them;
// the member answers only a client that used every one of them.
func TestFlagsBeforeOrAfterTheCommand(t *testing.T) {
	p := writeTestPKI(t, t.TempDir())
	addr := serveTLS(t, p)
	ep, tlsFlags := "--endpoints="+addr, []string{"--cert", p.operator, "--key", p.operatorKey, "--cacert", p.ca}
	cat := func(parts ...[]string) []string {
		var all []string
		for _, part := range parts {
			all = append(all, part...)
		}
		return all
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"after", cat([]string{"member", "list", ep}, tlsFlags), "store-0"},
		{"before", cat([]string{ep}, tlsFlags, []string{"member", "list"}), "store-0"},
		{"before, value apart", cat([]string{"--endpoints", addr, "--timeout", "20s"}, tlsFlags, []string{"member", "list"}), "store-0"},
		{"between the words", cat([]string{"member", ep}, tlsFlags, []string{"list"}), "store-0"},
		{"around", cat([]string{"--timeout=20s", ep, "member"}, tlsFlags[:2], []string{"list"}, tlsFlags[2:]), "store-0"},
		{"single dash", cat([]string{"-endpoints", addr, "status", "-cert", p.operator, "-key", p.operatorKey, "-cacert", p.ca}), "member store-0 leader store-0"},
		{"status, before", cat([]string{ep}, tlsFlags, []string{"status"}), "member store-0 leader store-0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCommandLine(tc.args...)
			if code != 0 || !strings.Contains(stdout, tc.want) {
				t.Fatalf("store %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
			}
		})
	}
}

// TestHelpPerCommand: --help (or -h), before or after a command, prints
// that command's usage with its flags on stdout and exits 0; a group's
// --help lists its commands; the member's --help lists every command.
func TestHelpPerCommand(t *testing.T) {
	connection := []string{"-endpoints", "-cert", "-key", "-cacert", "-timeout"}
	for _, tc := range []struct {
		words    []string
		synopsis string
		flags    []string
	}{
		{[]string{"member", "list"}, "store member list", connection},
		{[]string{"member", "add"}, "store member add <id> <peer-ip:port> [<client-host:port>]", append([]string{"-non-voter"}, connection...)},
		{[]string{"member", "remove"}, "store member remove <id>", connection},
		{[]string{"member", "promote"}, "store member promote <id>", connection},
		{[]string{"leader", "transfer"}, "store leader transfer [<id>]", connection},
		{[]string{"status"}, "store status", connection},
		{[]string{"snapshot", "save"}, "store snapshot save <file>", connection},
		{[]string{"snapshot", "restore"}, "store snapshot restore <file>", []string{"-data-dir"}},
	} {
		for _, args := range [][]string{
			append(append([]string(nil), tc.words...), "--help"),
			append(append([]string(nil), tc.words...), "-h"),
			append([]string{"--help"}, tc.words...),
		} {
			code, stdout, stderr := runCommandLine(args...)
			if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: "+tc.synopsis+" [flags]\n") {
				t.Errorf("store %s: exit %d, stderr %q, stdout %q; want exit 0 and the usage of %q", strings.Join(args, " "), code, stderr, stdout, tc.synopsis)
				continue
			}
			for _, f := range tc.flags {
				if !strings.Contains(stdout, "  "+f+" ") && !strings.Contains(stdout, "  "+f+"\n") {
					t.Errorf("store %s: usage does not list %s:\n%s", strings.Join(args, " "), f, stdout)
				}
			}
			if len(tc.flags) == 1 && strings.Contains(stdout, "-endpoints") {
				t.Errorf("store %s: an offline command lists connection flags:\n%s", strings.Join(args, " "), stdout)
			}
		}
	}

	code, stdout, _ := runCommandLine("member", "--help")
	if code != 0 || !strings.Contains(stdout, "store member remove <id>") || strings.Contains(stdout, "store snapshot") {
		t.Errorf("store member --help: exit %d, stdout:\n%s", code, stdout)
	}

	for _, args := range [][]string{{"--help"}, {"-h"}, {"--data-dir", "d", "--help"}} {
		code, stdout, stderr := runCommandLine(args...)
		if code != 0 || stderr != "" {
			t.Errorf("store %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		for _, want := range []string{"store member list", "store member add <id>", "store member remove", "store member promote",
			"store leader transfer", "store status", "store snapshot save <file>", "store snapshot restore <file>",
			"-data-dir", "-peer-listen", "-initial-cluster", "-metrics-listen"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("store %s does not mention %q:\n%s", strings.Join(args, " "), want, stdout)
			}
		}
	}
}

// TestBadCommandLines: a command line that cannot run exits 2 with one
// line naming the problem and one saying where the usage is, never the
// whole usage.
func TestBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"member", "list", "--bogus"}, "store member list: flag provided but not defined: -bogus\nrun 'store member list --help' for its usage\n"},
		{[]string{"--bogus", "member", "list"}, "store member list: flag provided but not defined: -bogus\n"},
		{[]string{"status", "--timeout", "soon"}, `store status: invalid value "soon" for flag -timeout`},
		{[]string{"status", "--timeout", "0s"}, "store status: --timeout must be positive\n"},
		{[]string{"member", "list", "--endpoints"}, "store member list: flag needs an argument: -endpoints\n"},
		{[]string{"member", "list", "--cert", "op.crt"}, "store member list: --cert and --key go together\n"},
		{[]string{"member"}, "store member: missing subcommand; one of list, add, remove, promote\nrun 'store member --help' for its usage\n"},
		{[]string{"member", "frob"}, `store member: unknown subcommand "frob"; one of list, add, remove, promote` + "\n"},
		{[]string{"member", "remove"}, "store member remove: missing <id>\n"},
		{[]string{"member", "add", "s3"}, "store member add: missing <peer-ip:port>\n"},
		{[]string{"member", "list", "extra"}, `store member list: unexpected argument "extra"` + "\n"},
		{[]string{"leader", "transfer", "a", "b"}, `store leader transfer: unexpected argument "b"` + "\n"},
		{[]string{"snapshot", "restore", "backup.snap"}, "store snapshot restore: --data-dir is required\n"},
		{[]string{"snapshot", "restore", "backup.snap", "--data-dir", "d", "--endpoints", "x:1"}, "store snapshot restore: flag provided but not defined: -endpoints\n"},
		{[]string{"--bogus"}, "store: flag provided but not defined: -bogus\nrun 'store --help' for the usage\n"},
		{[]string{"--data-dir", "d", "--listen"}, "store: flag needs an argument: -listen\n"},
		{[]string{"--data-dir", "d", "memebr", "list"}, `store: unknown command "memebr"; the commands are member, leader, status, snapshot`},
		{nil, "store: --data-dir is required\n"},
	} {
		code, stdout, stderr := runCommandLine(tc.args...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("store %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), code, stdout, stderr, tc.want)
		}
		if lines := strings.Count(stderr, "\n"); lines > 2 {
			t.Errorf("store %s: %d lines on stderr, want the problem and where the usage is:\n%s", strings.Join(tc.args, " "), lines, stderr)
		}
	}
}

// TestMemberFlags: a member's command line is parsed as such, with the
// member flags and values that look like commands.
func TestMemberFlags(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"--data-dir", dir},
		{"--data-dir", dir, "--id", "status", "--listen", "127.0.0.1:2481"},
		{"--id=member", "--non-voter", "--join", "127.0.0.1:2479", "--peer-listen", "127.0.0.1:2482", "--data-dir", dir},
	} {
		if code, stdout, stderr := runCommandLine(args...); code != -1 {
			t.Errorf("store %s: exit %d, stdout %q, stderr %q; want a member to run", strings.Join(args, " "), code, stdout, stderr)
		}
	}
	f, err := parseFlags([]string{"--data-dir", dir, "--id", "status", "--listen", "127.0.0.1:2481"})
	if err != nil || f.id != "status" || f.listen != "127.0.0.1:2481" || f.dataDir != dir {
		t.Fatalf("parseFlags: %+v, %v", f, err)
	}
}

// TestDefaultAddress: a member listens where the CLI (and every service
// using the store: client.DefaultAddress) looks for it by default.
func TestDefaultAddress(t *testing.T) {
	f, err := parseFlags([]string{"--data-dir", filepath.Join(t.TempDir(), "d")})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := parseCLI([]string{"member", "list"})
	if err != nil {
		t.Fatal(err)
	}
	if f.listen != client.DefaultAddress || inv.conn.endpoints != client.DefaultAddress {
		t.Fatalf("default --listen %s, default --endpoints %s; want both %s", f.listen, inv.conn.endpoints, client.DefaultAddress)
	}
}
