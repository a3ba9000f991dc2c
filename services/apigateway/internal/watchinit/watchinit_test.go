package watchinit

import (
	"context"
	"testing"
)

// TestSentOnce: the func of With runs on the first Sent only, through
// derived contexts too; Sent without one does nothing.
func TestSentOnce(t *testing.T) {
	Sent(context.Background())
	n := 0
	ctx := With(context.Background(), func() { n++ })
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	if n != 0 {
		t.Fatalf("ran %d times before Sent", n)
	}
	Sent(derived)
	Sent(ctx)
	if n != 1 {
		t.Fatalf("ran %d times, want 1", n)
	}
}
