package cache

import (
	"sync"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFrameEncodedOncePerFormat: concurrent watchers of one format get the
// very same bytes; each format and kind is encoded separately.
func TestFrameEncodedOncePerFormat(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Core()...)
	res, _ := reg.Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	prev := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "4", Labels: map[string]string{"a": "1"}}}
	cur := prev.DeepCopy()
	cur.ResourceVersion, cur.Labels = "5", nil
	for _, o := range []*corev1.ConfigMap{prev, cur} {
		if err := c.SetKind(o); err != nil {
			t.Fatal(err)
		}
	}
	ev := &Event{Rev: 5, Key: res.Key("ns", "cm"), Namespace: "ns", Obj: cur, Prev: prev, enc: newEncoders(c, res, nil)}
	var wg sync.WaitGroup
	frames := make([][]byte, 50)
	for i := range frames {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := ev.Frame(FrameModified, FormatJSON)
			if err != nil {
				t.Error(err)
			}
			frames[i] = f
		}()
	}
	wg.Wait()
	for _, f := range frames {
		if &f[0] != &frames[0][0] {
			t.Fatal("a watcher got its own encoding")
		}
	}
	pb, err := ev.Frame(FrameModified, FormatProtobuf)
	if err != nil || &pb[0] == &frames[0][0] {
		t.Fatalf("protobuf frame: %v", err)
	}
	left, err := ev.Frame(FrameDeletedPrev, FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	// Leaving the selector: the previous state at the event's revision;
	// the shared previous object is not modified.
	if want := `"resourceVersion":"5"`; !contains(left, want) || !contains(left, `"a":"1"`) || prev.ResourceVersion != "4" {
		t.Fatalf("deleted-prev frame %s", left)
	}
}

func contains(b []byte, s string) bool {
	return len(s) <= len(b) && string(b) != "" && indexOf(string(b), s) >= 0
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
