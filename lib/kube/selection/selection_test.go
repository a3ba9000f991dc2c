package selection

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLabelEquals: only a selector that pins a label to one value names
// it; watchfanout's cache files watchers under it.
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

// TestMatchesMetadata: for a filter of names, namespaces and labels,
// MatchesMetadata decides as Matches does on the whole object.
func TestMatchesMetadata(t *testing.T) {
	reg := registry.New(registry.Core()...)
	secrets, _ := reg.Lookup(corev1.SchemeGroupVersion.WithResource("secrets"))
	objs := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "x", Labels: map[string]string{"app": "web", "tier": "1"}}, Type: corev1.SecretTypeOpaque},
		{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "y", Labels: map[string]string{"app": "db"}}, Type: corev1.SecretTypeTLS},
		{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "x"}},
	}
	for _, tc := range []struct {
		labels, fields string
		metadataOnly   bool
	}{
		{"", "", true},
		{"app=web", "", true},
		{"app!=web", "", true},
		{"!app", "", true},
		{"app in (web,db),tier", "", true},
		{"", "metadata.name=a", true},
		{"", "metadata.name!=a,metadata.namespace=x", true},
		{"app", "metadata.namespace=y", true},
		{"", "type=Opaque", false},
		{"app=web", "metadata.name=a,type=Opaque", false},
	} {
		f, err := New(secrets, tc.labels, tc.fields)
		if err != nil {
			t.Fatalf("%q %q: %v", tc.labels, tc.fields, err)
		}
		if f.MetadataOnly() != tc.metadataOnly {
			t.Errorf("%q %q: MetadataOnly %t", tc.labels, tc.fields, f.MetadataOnly())
		}
		if !tc.metadataOnly {
			continue
		}
		for _, o := range objs {
			if got, want := f.MatchesMetadata(o.Name, o.Namespace, o.Labels), f.Matches(o); got != want {
				t.Errorf("%q %q on %s/%s: MatchesMetadata %t, Matches %t", tc.labels, tc.fields, o.Namespace, o.Name, got, want)
			}
		}
	}
}
