package selection

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	corev1 "k8s.io/api/core/v1"
)

// TestLabelEquals: only a selector that pins a label to one value names
// it; the watch cache files watchers under it.
func TestLabelEquals(t *testing.T) {
	reg := registry.New(registry.Core()...)
	res, _ := reg.Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	for _, tc := range []struct {
		sel        string
		key, value string
		ok         bool
	}{
		{"", "", "", false},
		{"app=a", "app", "a", true},
		{"app==a", "app", "a", true},
		{"app in (a)", "app", "a", true},
		{"app in (a,b)", "", "", false},
		{"app!=a", "", "", false},
		{"app", "", "", false},
		{"!app", "", "", false},
		{"app notin (a)", "", "", false},
		{"tier in (x,y),app=a", "app", "a", true},
	} {
		f, err := New(res, tc.sel, "")
		if err != nil {
			t.Fatalf("%q: %v", tc.sel, err)
		}
		k, v, ok := f.LabelEquals()
		if k != tc.key || v != tc.value || ok != tc.ok {
			t.Errorf("%q: got %q=%q %v, want %q=%q %v", tc.sel, k, v, ok, tc.key, tc.value, tc.ok)
		}
	}
}
