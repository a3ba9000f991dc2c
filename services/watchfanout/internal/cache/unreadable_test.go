package cache

import (
	"errors"
	"testing"
	"time"
)

// TestUnreadableObjectsReachTheirWatchers: an object whose value did not
// decrypt reaches every watcher it may concern — of its namespace, of
// its name, of any label (its labels are unknown) — and their frames fail
// with the reason; a watcher of another name does not get it.
func TestUnreadableObjectsReachTheirWatchers(t *testing.T) {
	r := testResource(t)
	all := subscribe(t, r, "a", "", "", -1)
	byLabel := subscribe(t, r, "a", "app=db", "", -1)
	byName := subscribe(t, r, "a", "", "metadata.name=x", -1)
	otherName := subscribe(t, r, "a", "", "metadata.name=y", -1)
	why := errors.New("failed to decrypt the stored value of /registry/configmaps/a/x: no key")
	r.applyBatch([]change{{key: "/registry/configmaps/a/x", rev: 1, obj: unreadable(1, why)}}, 1, time.Now())
	for name, sub := range map[string]*Subscription{"namespace": all, "label": byLabel, "name": byName} {
		items, err := sub.TryNext(nil)
		if err != nil || len(items) != 1 {
			t.Fatalf("%s watcher: %v, %v", name, items, err)
		}
		if _, err := items[0].Ev.Frame(items[0].Kind, FormatJSON); !errors.Is(err, why) {
			t.Errorf("%s watcher's frame: %v, want %v", name, err, why)
		}
	}
	if items, err := otherName.TryNext(nil); err != nil || len(items) != 0 {
		t.Errorf("the watcher of another name got %v, %v", items, err)
	}
}
