package registry

import (
	"testing"
)

// TestForKey: a store key finds the resource whose KeyPrefix holds it,
// for core and named groups, namespaced and cluster-scoped; other keys
// find none.
func TestForKey(t *testing.T) {
	reg := New(Core()...)
	for _, res := range reg.All() {
		for _, key := range []string{res.Key("ns", "name"), res.Key("", "name"), res.KeyPrefix("")} {
			if got := reg.ForKey(key); got == nil || got.KeyPrefix("") != res.KeyPrefix("") {
				t.Errorf("%s: %v, want %s", key, got, res.GVR)
			}
		}
	}
	for _, key := range []string{"", "/registry/", "/registry/nothing/x", "/other/configmaps/ns/x", "/registry/configmaps"} {
		if got := reg.ForKey(key); got != nil {
			t.Errorf("%q found %s", key, got.GVR)
		}
	}
}
