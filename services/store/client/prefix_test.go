package client

import (
	"bytes"
	"testing"
)

// TestPrefixEnd: the range end is the first key after every key with the
// prefix, carrying past 0xff bytes, and "every key" when none is after.
func TestPrefixEnd(t *testing.T) {
	for _, c := range []struct {
		prefix string
		want   []byte
	}{
		{"/registry/configmaps/", []byte("/registry/configmaps0")},
		{"a\xff", []byte("b")},
		{"a\xff\xff", []byte("b")},
		{"\xff\xff", []byte{0}},
	} {
		if got := PrefixEnd(c.prefix); !bytes.Equal(got, c.want) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
}
