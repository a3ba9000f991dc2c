package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Command is a service binary that serves one gRPC listener: its name, the
// defaults of the flags every service has, its own flags and how to build
// the service from them.
type Command struct {
	// Name names the service in usage, logs and errors.
	Name string
	// Listen and MetricsListen are the defaults of --listen and
	// --metrics-listen.
	Listen, MetricsListen string
	// Flags defines the service's own flags on fs; nil: none.
	Flags func(fs *flag.FlagSet)
	// Check validates the parsed flags before anything is built, and may
	// adjust the common ones; nil: nothing to check.
	Check func(common *Flags) error
	// Build builds the service in the environment Run made.
	Build func(ctx context.Context, env Env) (Server, error)
}

// Run parses args (-h prints the usage and returns nil), calls Check, then
// serves what Build builds as the package's Run does until ctx is done or
// SIGINT/SIGTERM arrives. Usage and logs go to stderr.
func (c Command) Run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var common Flags
	common.Register(fs, c.Listen, c.MetricsListen)
	if c.Flags != nil {
		c.Flags(fs)
	}
	if err := ParseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if c.Check != nil {
		if err := c.Check(&common); err != nil {
			return err
		}
	}
	return Run(ctx, c.Name, &common, stderr, c.Build)
}

// Main is the main function of the binary name: it calls run with a
// context cancelled on SIGINT or SIGTERM, the arguments after the program
// name and stderr, and when run fails prints the error on stderr, prefixed
// with "name: " unless it already is, and exits with status 1.
func Main(name string, run func(ctx context.Context, args []string, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, name+": ") {
			msg = name + ": " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}
