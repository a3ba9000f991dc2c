package apf

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestFormat: UIDs and grant IDs are in the canonical 8-4-4-4-12 form of
// lowercase hex, the bytes in order.
func TestFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		var u [16]byte
		for i := range u {
			u[i] = byte(rng.UintN(256))
		}
		want := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		if got := format(u); got != want {
			t.Fatalf("format(%v) = %s, want %s", u, got, want)
		}
	}
}
