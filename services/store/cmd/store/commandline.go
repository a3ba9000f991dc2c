package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// commandLine decides what the command line asks for. An admin command
// (its first positional argument names one, wherever the flags are) is
// run; --help prints the usage, the admin commands included; a command
// line it cannot run is answered with one line saying why. In these cases
// it returns the exit code. Otherwise it returns the flags of the member
// to run, with serve set.
func commandLine(args []string, stdout, stderr io.Writer) (f flags, code int, serve bool) {
	if isCLI(args) {
		return f, runCLI(args, stdout, stderr), false
	}
	f, err := parseFlags(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, serverUsage())
		return f, 0, false
	case err != nil:
		fmt.Fprintf(stderr, "store: %s\nrun 'store --help' for the usage\n", strings.ReplaceAll(err.Error(), "\n", "\nstore: "))
		return f, 2, false
	}
	return f, 0, true
}

// isCLI reports whether args run an admin command rather than a member:
// their first positional argument is a command or a group of commands.
// Flags are skipped with their values, a member's flags included, so
// that `store --endpoints x member list` is the admin command.
func isCLI(args []string) bool {
	cmds := commands()
	sets := append(cliFlagSets(cmds), serverFlagSet(&flags{}))
	pos := positionals(args, sets...)
	return len(pos) > 0 && slices.Contains(commandGroups(), args[pos[0]])
}

// serverUsage is the binary's help: how to run a member, the admin
// commands, and a member's flags.
func serverUsage() string {
	var b strings.Builder
	b.WriteString("usage: store --data-dir <dir> [flags]       run a member of a store cluster\n" +
		"       store <command> [args] [flags]      administer a running cluster\n\n" +
		"commands ('store <command> --help' shows each one's flags):\n")
	writeCommandList(&b, commands())
	b.WriteString("\nflags of a member:\n")
	fs := serverFlagSet(&flags{})
	fs.SetOutput(&b)
	fs.PrintDefaults()
	return b.String()
}
