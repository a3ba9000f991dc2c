package cache

import (
	"strings"
	"sync"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestFrameEncodedOncePerFormat: concurrent watchers of one format get the
// very same bytes; each format and kind is encoded separately.
func TestFrameEncodedOncePerFormat(t *testing.T) {
	c, res := configMaps(t)
	prev := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "4", Labels: map[string]string{"a": "1"}}}
	cur := prev.DeepCopy()
	cur.ResourceVersion, cur.Labels = "5", nil
	for _, o := range []*corev1.ConfigMap{prev, cur} {
		if err := c.SetKind(o); err != nil {
			t.Fatal(err)
		}
	}
	ev := testEvent(t, c, res, 5, cur, prev)
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

// TestFramesOfEverySlot: frames of every format and kind requested at once
// from many goroutines: each (format, kind) is encoded once, and the list
// they are kept in returns each one's own bytes.
func TestFramesOfEverySlot(t *testing.T) {
	c, res := configMaps(t)
	prev := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", ResourceVersion: "4"}, Data: map[string]string{"k": "old"}}
	cur := prev.DeepCopy()
	cur.ResourceVersion, cur.Data = "5", map[string]string{"k": "new"}
	for _, o := range []*corev1.ConfigMap{prev, cur} {
		if err := c.SetKind(o); err != nil {
			t.Fatal(err)
		}
	}
	ev := testEvent(t, c, res, 5, cur, prev)
	const n = int(numFormats) * int(numKinds)
	got := make([][][]byte, 8)
	var wg sync.WaitGroup
	for g := range got {
		got[g] = make([][]byte, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n {
				// Each goroutine in another order (multipliers prime
				// to n).
				slot := (i*[]int{1, 2, 3, 4, 6, 7, 8, 9}[g] + g) % n
				f, k := Format(slot/int(numKinds)), FrameKind(slot%int(numKinds))
				b, err := ev.Frame(k, f)
				if err != nil {
					t.Error(err)
					return
				}
				got[g][slot] = b
			}
		}()
	}
	wg.Wait()
	for slot := range n {
		for g := range got {
			if &got[g][slot][0] != &got[0][slot][0] {
				t.Fatalf("slot %d encoded more than once", slot)
			}
		}
		f, k := Format(slot/int(numKinds)), FrameKind(slot%int(numKinds))
		want, err := ev.enc.f[f].Frame(k.eventType(), map[bool]runtime.Object{true: withRV(t, cur, "5"), false: withRV(t, prev, "5")}[k != FrameDeletedPrev])
		if err != nil {
			t.Fatal(err)
		}
		if f >= FormatTableNone {
			continue // Tables carry the age, which moves
		}
		if string(got[0][slot]) != string(want) {
			t.Fatalf("slot %d (format %d, kind %d): %q, want %q", slot, f, k, got[0][slot], want)
		}
	}
	frames := 0
	for fr := ev.frames.Load(); fr != nil; fr = fr.next {
		frames++
	}
	if frames != n {
		t.Fatalf("%d frames kept, want %d", frames, n)
	}
}

// configMaps returns a codec and the configmaps resource.
func configMaps(t testing.TB) (*codec.Codec, *registry.Resource) {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	res, _ := registry.New(registry.Core()...).Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	return c, res
}

// testEvent is the event of a change from prev (nil: a create) to cur at
// rev, its objects stored as the store holds them.
func testEvent(t testing.TB, c *codec.Codec, res *registry.Resource, rev int64, cur, prev runtime.Object) *Event {
	t.Helper()
	enc := newEncoders(c, res, nil)
	stored := func(obj runtime.Object, rev int64) *object {
		v, err := c.EncodeStorage(obj)
		if err != nil {
			t.Fatal(err)
		}
		o, err := newObject(enc, v, rev, nil)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ev := &Event{Rev: rev, Key: res.Key("ns", "cm"), Namespace: "ns", obj: stored(cur, rev), enc: enc}
	if prev != nil {
		ev.prev = stored(prev, rev-1)
	}
	ev.own = ownEnvelope(ev.obj, rev)
	return ev
}

func withRV(t *testing.T, o *corev1.ConfigMap, rv string) runtime.Object {
	t.Helper()
	c := o.DeepCopy()
	c.ResourceVersion = rv
	return c
}

// BenchmarkProtoFrame: writing an event's protobuf frame into a batch
// from the stored object (at its own revision: a head and the object's
// bytes; at another: spliced), against copying a memoized frame.
func BenchmarkProtoFrame(b *testing.B) {
	c, res := configMaps(b)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm-00001", UID: "0b4d8d6c-3f3a-4c1e-9d8e-000000000001", CreationTimestamp: metav1.Now()},
		Data:       map[string]string{"data": strings.Repeat("x", 1024)},
	}
	ev := testEvent(b, c, res, 12345, cm, cm)
	buf := make([]byte, 0, 64<<10)
	for _, k := range []struct {
		name string
		kind FrameKind
	}{{"own revision", FrameAdded}, {"spliced", FrameDeletedPrev}} {
		b.Run(k.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				var pf ProtoFrame
				if !ev.ProtoFrame(k.kind, &pf) {
					b.Fatal("not spliceable")
				}
				if len(buf)+pf.Size() > cap(buf) {
					buf = buf[:0]
				}
				buf = pf.AppendTo(buf)
			}
		})
	}
	b.Run("memoized", func(b *testing.B) {
		b.ReportAllocs()
		f, err := ev.Frame(FrameAdded, FormatProtobuf)
		if err != nil {
			b.Fatal(err)
		}
		for range b.N {
			if len(buf)+len(f) > cap(buf) {
				buf = buf[:0]
			}
			buf = append(buf, f...)
		}
	})
}
