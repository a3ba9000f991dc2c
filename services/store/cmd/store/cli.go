package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/services/store/client"
)

// The admin CLI: `store <command> [args] [flags]`. Flags may come before
// the command's words, between them, or after them and its arguments;
// `--help` anywhere prints the command's usage. See commands.go for the
// commands.

// connection is the flags of every command that contacts members.
type connection struct {
	endpoints, cert, key, cacert string
	timeout                      time.Duration
}

// register defines the connection flags on fs.
func (c *connection) register(fs *flag.FlagSet) {
	fs.StringVar(&c.endpoints, "endpoints", client.DefaultAddress, "comma-separated gRPC addresses of members (host:port)")
	fs.StringVar(&c.cert, "cert", "", "operator client certificate (PEM, O=meridian:operators, signed by the internal CA); empty: plaintext")
	fs.StringVar(&c.key, "key", "", "private key of --cert (PEM)")
	fs.StringVar(&c.cacert, "cacert", "", "CA bundle (PEM) verifying the members' certificates (the internal CA)")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "bound on the whole command")
}

// check returns what is wrong with the connection flags as a usage error
// message; "" when nothing.
func (c *connection) check() string {
	if (c.cert == "") != (c.key == "") {
		return "--cert and --key go together"
	}
	if c.timeout <= 0 {
		return "--timeout must be positive"
	}
	return ""
}

// tlsConfig is the TLS configuration the flags ask for, as every client of
// the store builds it (pki.LoadClientTLS: the certificate is read again
// when its files change); nil (plaintext) when neither --cert nor
// --cacert is set.
func (c *connection) tlsConfig() (*tls.Config, error) {
	if c.cert == "" && c.cacert == "" {
		return nil, nil
	}
	cfg, err := pki.LoadClientTLS(c.cert, c.key, c.cacert, "", nil)
	if err != nil {
		return nil, fmt.Errorf("load --cert, --key and --cacert: %w", err)
	}
	return cfg, nil
}

// invocation is one parsed command line of the CLI.
type invocation struct {
	cmd  *command
	args []string // positional arguments, the command's words excluded
	conn connection
	// Flags of single commands.
	nonVoter bool
	dataDir  string
	// skipPresent: snapshot restore leaves a data directory that holds a store.
	skipPresent bool
}

// usageError is a command line the CLI cannot run; msg says why.
type usageError struct {
	cmd string // the command's words, or its group's
	msg string
}

func (e *usageError) Error() string { return e.msg }

// helpError answers --help: usage is the text to print.
type helpError struct{ usage string }

func (e *helpError) Error() string { return "help requested" }

// Is makes a helpError match flag.ErrHelp.
func (e *helpError) Is(target error) bool { return target == flag.ErrHelp }

// runCLI runs an admin command line and returns the exit code: 0 after
// success or --help (the usage goes to stdout), 2 for a command line it
// cannot run (one line saying why, and where the usage is), 1 when the
// command failed.
func runCLI(args []string, stdout, stderr io.Writer) int {
	err := cli(args, stdout)
	var help *helpError
	var usage *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.usage)
		return 0
	case errors.As(err, &usage) && usage.cmd == "":
		fmt.Fprintf(stderr, "store: %s\nrun 'store --help' for the usage\n", usage.msg)
		return 2
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "store %s: %s\nrun 'store %s --help' for its usage\n", usage.cmd, usage.msg, usage.cmd)
		return 2
	default:
		fmt.Fprintf(stderr, "store %v\n", err)
		return 1
	}
}

// cli parses and runs an admin command line. Errors are a *helpError, a
// *usageError, or the command's failure prefixed with its name.
func cli(args []string, out io.Writer) error {
	inv, err := parseCLI(args)
	if err != nil {
		return err
	}
	if err := inv.exec(out); err != nil {
		return fmt.Errorf("%s: %w", inv.cmd.name, err)
	}
	return nil
}

// exec runs the parsed command: offline, or on a client of the members.
func (inv *invocation) exec(out io.Writer) error {
	if inv.cmd.offline {
		return inv.cmd.run(context.Background(), nil, inv, out)
	}
	tlsCfg, err := inv.conn.tlsConfig()
	if err != nil {
		return err
	}
	c, err := client.Dial(client.Endpoints(inv.conn.endpoints), tlsCfg)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), inv.conn.timeout)
	defer cancel()
	return inv.cmd.run(ctx, c, inv, out)
}

// parseCLI parses an admin command line: the command's words are its
// first positional arguments; its flags, the connection flags included,
// may come anywhere.
func parseCLI(args []string) (*invocation, error) {
	cmds := commands()
	pos := positionals(args, cliFlagSets(cmds)...)
	words := make([]string, len(pos))
	for i, p := range pos {
		words[i] = args[p]
	}
	cmd, n, err := findCommand(cmds, words, wantsHelp(args))
	if err != nil {
		return nil, err
	}
	rest := make([]string, 0, len(args))
	for i, a := range args {
		if !slices.Contains(pos[:n], i) {
			rest = append(rest, a)
		}
	}
	inv := &invocation{cmd: cmd}
	fs := cmd.flagSet(inv)
	if inv.args, err = parseInterleaved(fs, rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &helpError{usage: cmd.usage()}
		}
		return nil, &usageError{cmd: cmd.name, msg: err.Error()}
	}
	if msg := cmd.checkArgs(inv.args); msg != "" {
		return nil, &usageError{cmd: cmd.name, msg: msg}
	}
	if !cmd.offline {
		if msg := inv.conn.check(); msg != "" {
			return nil, &usageError{cmd: cmd.name, msg: msg}
		}
	}
	if cmd.check != nil {
		if msg := cmd.check(inv); msg != "" {
			return nil, &usageError{cmd: cmd.name, msg: msg}
		}
	}
	return inv, nil
}

// findCommand returns the command words names and how many of the words
// it takes. A group's name alone ("member") is answered with the group's
// usage when help is set, and a usage error otherwise.
func findCommand(cmds []*command, words []string, help bool) (*command, int, error) {
	if len(words) == 0 {
		return nil, 0, &usageError{cmd: "", msg: "no command"}
	}
	var group []*command
	for _, c := range cmds {
		first, sub, _ := strings.Cut(c.name, " ")
		switch {
		case c.name == words[0]:
			return c, 1, nil
		case first == words[0]:
			if len(words) > 1 && sub == words[1] {
				return c, 2, nil
			}
			group = append(group, c)
		}
	}
	if len(group) == 0 {
		return nil, 0, &usageError{cmd: "", msg: fmt.Sprintf("unknown command %q", words[0])}
	}
	if len(words) < 2 && help {
		return nil, 0, &helpError{usage: groupUsage(words[0], group)}
	}
	var subs []string
	for _, c := range group {
		_, sub, _ := strings.Cut(c.name, " ")
		subs = append(subs, sub)
	}
	msg := "missing subcommand"
	if len(words) > 1 {
		msg = fmt.Sprintf("unknown subcommand %q", words[1])
	}
	return nil, 0, &usageError{cmd: words[0], msg: msg + "; one of " + strings.Join(subs, ", ")}
}

// flagSet defines the command's flags on a new flag set storing them in
// inv. It prints nothing: parseCLI reports errors and usage.
func (c *command) flagSet(inv *invocation) *flag.FlagSet {
	fs := flag.NewFlagSet("store "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if !c.offline {
		inv.conn.register(fs)
	}
	if c.flags != nil {
		c.flags(fs, inv)
	}
	return fs
}

// checkArgs returns what is wrong with the number of positional
// arguments; "" when nothing.
func (c *command) checkArgs(args []string) string {
	required := 0
	for _, a := range c.args {
		if !strings.HasPrefix(a, "[") {
			required++
		}
	}
	switch {
	case len(args) < required:
		return "missing " + strings.Join(c.args[len(args):required], " ")
	case len(args) > len(c.args):
		return fmt.Sprintf("unexpected argument %q", args[len(c.args)])
	}
	return ""
}

// synopsis is the command's words and arguments.
func (c *command) synopsis() string {
	return strings.Join(append([]string{c.name}, c.args...), " ")
}

// usage is the command's help: synopsis, what it does and its flags.
func (c *command) usage() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: store %s [flags]\n\n%s.\n", c.synopsis(), capitalize(c.about))
	if !c.offline {
		b.WriteString("\nIt goes to the members of --endpoints; one that answers is enough. Members\n" +
			"running with TLS, as in production, need --cacert (the internal CA) and\n" +
			"an operator's certificate: --cert and --key, O=meridian:operators.\n")
	}
	b.WriteString("\nflags (before or after the command):\n")
	fs := c.flagSet(&invocation{})
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}

// groupUsage is the help of a group of commands ("store member --help").
func groupUsage(group string, cmds []*command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: store %s <subcommand> [args] [flags]\n\n", group)
	writeCommandList(&b, cmds)
	fmt.Fprintf(&b, "\n'store %s <subcommand> --help' shows a subcommand's flags.\n", group)
	return b.String()
}

// writeCommandList writes one line per command: synopsis and purpose.
func writeCommandList(w io.Writer, cmds []*command) {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	for _, c := range cmds {
		fmt.Fprintf(tw, "  store %s\t%s\n", c.synopsis(), c.about)
	}
	_ = tw.Flush()
}

// commandGroups returns the first words of the commands, each once.
func commandGroups() []string {
	var groups []string
	for _, c := range commands() {
		first, _, _ := strings.Cut(c.name, " ")
		if !slices.Contains(groups, first) {
			groups = append(groups, first)
		}
	}
	return groups
}

// cliFlagSets returns one flag set per command, so that positionals can
// tell which flags take a value.
func cliFlagSets(cmds []*command) []*flag.FlagSet {
	sets := make([]*flag.FlagSet, len(cmds))
	for i, c := range cmds {
		sets[i] = c.flagSet(&invocation{})
	}
	return sets
}

// parseInterleaved parses fs's flags wherever they are in args and
// returns the positional arguments in order; everything after "--" is
// positional.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// positionals returns the indexes of args' positional arguments, in the
// way the flag package parses (a flag's value is the next argument unless
// it is a boolean flag or written -flag=value; "--" ends the flags) but
// with flags allowed anywhere. Whether a flag takes a value is looked up
// in sets; a flag none defines is taken to have none (parsing reports it).
func positionals(args []string, sets ...*flag.FlagSet) []int {
	var pos []int
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			for j := i + 1; j < len(args); j++ {
				pos = append(pos, j)
			}
			return pos
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, i)
			continue
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue(name, sets) {
			i++
		}
	}
	return pos
}

// takesValue reports whether the flag name, as the first set that
// defines it has it, is followed by a value.
func takesValue(name string, sets []*flag.FlagSet) bool {
	for _, fs := range sets {
		if f := fs.Lookup(name); f != nil {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			return !ok || !b.IsBoolFlag()
		}
	}
	return false
}

// wantsHelp reports whether args ask for help (-h or -help, with one or
// two dashes, before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "--h", "-help", "--help":
			return true
		}
	}
	return false
}

// capitalize returns s with its first letter in upper case.
func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
