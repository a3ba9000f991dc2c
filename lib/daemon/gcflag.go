package daemon

import (
	"flag"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
)

// GCPercent is a binary's --gc-percent flag: Go's GC target (as GOGC),
// for a service whose live heap is small and whose every request
// allocates, where Go's default of 100 collects many times a second under
// load. GOGC in the environment, when set to a value Go accepts, is the
// flag's default instead of the binary's own.
type GCPercent struct {
	value int
}

// Register defines --gc-percent on fs with def as the default when GOGC
// is not set (env is GOGC's value).
func (g *GCPercent) Register(fs *flag.FlagSet, def int, env string) {
	fs.IntVar(&g.value, "gc-percent", gcPercentDefault(env, def), fmt.Sprintf("Go's GC target (as GOGC): the heap grows by this percentage of the live heap between collections; -1 turns the GC off (then set --memory-limit). Default %d, or GOGC when set", def))
}

// Check reports a value Go's runtime would not take.
func (g *GCPercent) Check() error {
	if g.value < -1 {
		return fmt.Errorf("--gc-percent must be -1 (off) or at least 0, got %d", g.value)
	}
	return nil
}

// Apply sets the process's GC target. The target is process-wide: call
// it in a binary's Build, never in a library or an all-in-one process
// whose other services did not ask for it.
func (g *GCPercent) Apply() { debug.SetGCPercent(g.value) }

// gcPercentDefault returns --gc-percent's default: GOGC's value when the
// environment sets it ("off" is -1; a value Go would not accept leaves
// def), else def.
func gcPercentDefault(gogc string, def int) int {
	switch v := strings.TrimSpace(gogc); {
	case v == "":
		return def
	case strings.EqualFold(v, "off"):
		return -1
	default:
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return def
		}
		return n
	}
}
