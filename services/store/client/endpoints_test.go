package client

import (
	"slices"
	"testing"
)

func TestEndpoints(t *testing.T) {
	for s, want := range map[string][]string{
		"":                           nil,
		" , ":                        nil,
		"127.0.0.1:2379":             {"127.0.0.1:2379"},
		"a:1, b:2,,c:3 ":             {"a:1", "b:2", "c:3"},
		"dns:///store.example:2379,": {"dns:///store.example:2379"},
	} {
		if got := Endpoints(s); !slices.Equal(got, want) {
			t.Errorf("Endpoints(%q) = %q, want %q", s, got, want)
		}
	}
}
