package codec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestListItemsCarryNoKind: a list built with SetListItems, and items
// written by EncodeListItem, name no kind of their own in JSON and YAML,
// as kube-apiserver's lists; the list and a single object still do; and
// the list decodes back to its items.
func TestListItemsCarryNoKind(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	item := func(name string) runtime.Object {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}, Data: map[string]string{"k": "v"}}
		if err := c.SetKind(cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	list := &corev1.ConfigMapList{}
	if err := SetListItems(list, []runtime.Object{item("a"), item("b")}); err != nil {
		t.Fatal(err)
	}
	js, err := c.EncodeToBytes(list, negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{},"items":[{"metadata":{"name":"a"`; !bytes.HasPrefix(js, []byte(want)) || strings.Count(string(js), `"kind"`) != 1 {
		t.Errorf("JSON list:\n got %s\nwant %s… and one kind", js, want)
	}
	ys, err := c.EncodeToBytes(list, negotiation.YAML)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(ys), "kind:") != 1 || !strings.Contains(string(ys), "kind: ConfigMapList") {
		t.Errorf("YAML list names the items' kind:\n%s", ys)
	}
	var back corev1.ConfigMapList
	if err := c.Decode(js, negotiation.JSON, corev1.SchemeGroupVersion.WithKind("ConfigMapList"), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Items) != 2 || back.Items[1].Name != "b" || back.Items[1].Data["k"] != "v" {
		t.Errorf("decoded %+v", back.Items)
	}

	var buf bytes.Buffer
	if err := c.EncodeListItem(&buf, item("c"), negotiation.JSON); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), `{"metadata":{"name":"c"`) {
		t.Errorf("list item: %s", buf.Bytes())
	}
	one, err := c.EncodeToBytes(item("d"), negotiation.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(one), `{"kind":"ConfigMap","apiVersion":"v1",`) {
		t.Errorf("a single object lost its kind: %s", one)
	}
}
