package distributed

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/ports"
)

// TestBinaryDefaults: each binary's --help shows, for each flag of
// lib/ports' table, the table's default; with the table's own test
// (distinct, loopback, every dialed address a listened one) this is what
// makes the five services started on one host without address flags find
// each other and bind no port twice.
func TestBinaryDefaults(t *testing.T) {
	bin := binaries(t)
	helps := map[string]string{}
	for _, d := range append(ports.Listeners(), ports.Peers()...) {
		help, ok := helps[d.Command]
		if !ok {
			words := strings.Fields(d.Command)
			out, err := exec.Command(filepath.Join(bin, words[0]), append(words[1:], "--help")...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", d.Command, err, out)
			}
			help = string(out)
			helps[d.Command] = help
		}
		got, found := flagDefault(help, strings.TrimPrefix(d.Flag, "--"))
		if !found {
			t.Errorf("%s --help lists no %s", d.Command, d.Flag)
			continue
		}
		if got != d.Address {
			t.Errorf("%s %s defaults to %q, want %s (lib/ports)", d.Command, d.Flag, got, d.Address)
		}
	}
}

// flagDefault returns the default of the flag name in a usage written by
// flag.PrintDefaults ("" when it shows none), and whether the flag is
// listed.
func flagDefault(usage, name string) (string, bool) {
	entry := regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(name) + `(?: \w+)?\n((?:    \t.*\n?)*)`).FindStringSubmatch(usage)
	if entry == nil {
		return "", false
	}
	def := regexp.MustCompile(`\(default "([^"]*)"\)\s*$`).FindStringSubmatch(entry[1])
	if def == nil {
		return "", true
	}
	return def[1], true
}
