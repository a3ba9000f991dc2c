package cache

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestUnreadFramesAreDropped: the JSON of an object a list copied is kept
// (the same bytes handed out again) while it is read between two drops,
// dropped after a whole period unread, and encoded again, byte for byte
// the same, when next asked for.
func TestUnreadFramesAreDropped(t *testing.T) {
	r := testResource(t)
	const n = 3
	var chs []change
	for i := range n {
		chs = append(chs, change{key: fmt.Sprintf("/registry/configmaps/ns/cm%d", i), rev: int64(i + 1), obj: storedOf(t, r, configMap("ns", fmt.Sprintf("cm%d", i), nil))})
	}
	r.applyBatch(chs, n, time.Now())
	events := make([]*Event, n)
	first := make([][]byte, n)
	for i := range n {
		events[i], _ = r.Get(chs[i].key)
		if events[i] == nil {
			t.Fatalf("%s not in the cache", chs[i].key)
		}
		x, err := events[i].ObjectJSON()
		if err != nil {
			t.Fatal(err)
		}
		first[i] = x
	}
	// Read during the period: kept through the first drop.
	r.dropUnreadFrames()
	for i, ev := range events {
		if x, _ := ev.ObjectJSON(); &x[0] != &first[i][0] {
			t.Fatalf("%s: JSON encoded again after a period it was read in", ev.Key)
		}
	}
	r.dropUnreadFrames() // read since the first drop: kept
	// Object 0 is read once more; the others stay unread for a period.
	if x, _ := events[0].ObjectJSON(); &x[0] != &first[0][0] {
		t.Fatal("cm0: JSON encoded again while read")
	}
	r.dropUnreadFrames()
	for i, ev := range events {
		dropped := ev.frames.Load() == nil
		if want := i != 0; dropped != want {
			t.Errorf("%s: frames dropped %v, want %v", ev.Key, dropped, want)
		}
		x, err := ev.ObjectJSON()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, first[i]) {
			t.Errorf("%s: JSON after the drop %s, before %s", ev.Key, x, first[i])
		}
		if again := &x[0] == &first[i][0]; again == dropped {
			t.Errorf("%s: dropped %v but the same bytes %v", ev.Key, dropped, again)
		}
	}
}
