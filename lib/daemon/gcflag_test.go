package daemon

import (
	"flag"
	"io"
	"testing"
)

// TestGCPercentDefault: --gc-percent defaults to the binary's value, or
// to GOGC when the environment sets a value Go accepts.
func TestGCPercentDefault(t *testing.T) {
	const def = 400
	for gogc, want := range map[string]int{
		"": def, "100": 100, " 50 ": 50, "0": 0, "off": -1, "OFF": -1,
		"-5": def, "lots": def,
	} {
		if got := gcPercentDefault(gogc, def); got != want {
			t.Errorf("GOGC=%q: default %d, want %d", gogc, got, want)
		}
	}
}

// TestGCPercentCheck: values below -1 are refused with the flag's name.
func TestGCPercentCheck(t *testing.T) {
	for arg, ok := range map[string]bool{"-1": true, "0": true, "250": true, "-2": false} {
		var g GCPercent
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		g.Register(fs, 400, "")
		if err := fs.Parse([]string{"--gc-percent", arg}); err != nil {
			t.Fatal(err)
		}
		if err := g.Check(); (err == nil) != ok {
			t.Errorf("--gc-percent %s: Check() = %v, want ok=%v", arg, err, ok)
		}
	}
}
