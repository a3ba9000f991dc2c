package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestProtobufListsMatchJSON lists through client-go in protobuf (which
// the gateway splices from the stored bytes) and in JSON (which it decodes
// and encodes object by object), whole and in chunks, and checks that
// both read the same typed objects, and that each listed object is what a
// protobuf GET of it reads: ConfigMaps (more than a store page), Secrets
// and Namespaces, with and without labels, managed fields from create and
// from server-side apply, non-ASCII text; and with selectors, those the
// splice matches against the stored metadata and those it leaves to
// decoding.
func TestProtobufListsMatchJSON(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ns := "splice"
	if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitNamespaceDefaults(ns)
	const n = 650
	inParallel(t, n, func(i int) error {
		name := fmt.Sprintf("cm-%04d", i)
		var err error
		switch i % 3 {
		case 0:
			_, err = e.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
				Data: map[string]string{"v": fmt.Sprint(i)}}, metav1.CreateOptions{})
		case 1:
			_, err = e.client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name,
				Labels: map[string]string{"app": "demo", "i": fmt.Sprint(i)}, Annotations: map[string]string{"note": "日本語 ✓ ünïcode"}},
				Data: map[string]string{"v": fmt.Sprintf("välue %d", i)}, BinaryData: map[string][]byte{"b": {0, 0xff, byte(i)}}}, metav1.CreateOptions{})
		case 2:
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"labels":{"applied":"yes"}},"data":{"v":"ä %d"}}`, name, i)
			_, err = e.client.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.ApplyPatchType, []byte(body), metav1.PatchOptions{FieldManager: "tester"})
		}
		return err
	})
	for i := 0; i < 20; i++ {
		if _, err := e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%02d", i)},
			Data: map[string][]byte{"p": []byte(fmt.Sprintf("pässword %d", i))}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if t.Failed() {
		return
	}

	pb, js := e.clientFor(t, "application/vnd.kubernetes.protobuf"), e.clientFor(t, "application/json")

	// Nothing changes from here on: every list reads the same objects.
	for _, limit := range []int64{0, 1, 250, 500, 649, 2000} {
		var pbItems, jsItems []corev1.ConfigMap
		pbCont, jsCont := "", ""
		for page := 0; ; page++ {
			p, err := pb.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: limit, Continue: pbCont})
			if err != nil {
				t.Fatal(err)
			}
			j, err := js.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{Limit: limit, Continue: jsCont})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Items) != len(j.Items) || (p.Continue == "") != (j.Continue == "") ||
				!apiequality.Semantic.DeepEqual(p.RemainingItemCount, j.RemainingItemCount) {
				t.Fatalf("limit %d page %d: protobuf %d items, continue %t, remaining %v; JSON %d, %t, %v", limit, page,
					len(p.Items), p.Continue != "", p.RemainingItemCount, len(j.Items), j.Continue != "", j.RemainingItemCount)
			}
			pbItems, jsItems = append(pbItems, p.Items...), append(jsItems, j.Items...)
			if p.Continue == "" {
				break
			}
			pbCont, jsCont = p.Continue, j.Continue
		}
		// The namespace's kube-root-ca.crt comes after the cm-*.
		if len(pbItems) != n+1 || pbItems[n].Name != rootCA {
			t.Fatalf("limit %d: %d items, want %d and %s", limit, len(pbItems), n, rootCA)
		}
		for i := range pbItems {
			// JSON items carry their kind, protobuf items cannot.
			jsItems[i].TypeMeta = metav1.TypeMeta{}
			if !apiequality.Semantic.DeepEqual(pbItems[i], jsItems[i]) {
				t.Fatalf("limit %d: item %d differs:\nprotobuf %+v\njson     %+v", limit, i, pbItems[i], jsItems[i])
			}
		}
		if limit == 0 {
			for _, i := range []int{0, 1, 2, 333, n - 1} {
				got, err := pb.CoreV1().ConfigMaps(ns).Get(ctx, pbItems[i].Name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				got.TypeMeta = metav1.TypeMeta{}
				if !apiequality.Semantic.DeepEqual(*got, pbItems[i]) {
					t.Fatalf("item %d: listed %+v\nget %+v", i, pbItems[i], *got)
				}
				if len(got.ManagedFields) == 0 || got.ResourceVersion == "" {
					t.Fatalf("item %d: no managed fields or resourceVersion: %+v", i, got.ObjectMeta)
				}
			}
		}
	}

	// Selectors on names, namespaces and labels are matched against the
	// stored metadata; the others decode.
	for _, opts := range []metav1.ListOptions{
		{LabelSelector: "app=demo"},
		{LabelSelector: "applied=yes", Limit: 100},
		{LabelSelector: "!app,!applied"},
		{FieldSelector: "metadata.name=cm-0004"},
		{FieldSelector: "metadata.namespace=" + ns, LabelSelector: "i in (1,4,7)"},
	} {
		p, err := pb.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		j, err := js.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range j.Items {
			j.Items[i].TypeMeta = metav1.TypeMeta{}
		}
		if len(p.Items) == 0 || !apiequality.Semantic.DeepEqual(p.Items, j.Items) || (p.Continue == "") != (j.Continue == "") {
			t.Fatalf("%+v: protobuf %d items, JSON %d, or they differ", opts, len(p.Items), len(j.Items))
		}
	}

	ps, err := pb.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Opaque"})
	if err != nil {
		t.Fatal(err)
	}
	jss, err := js.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{FieldSelector: "type=Opaque"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range jss.Items {
		jss.Items[i].TypeMeta = metav1.TypeMeta{}
	}
	if len(ps.Items) != 20 || !apiequality.Semantic.DeepEqual(ps.Items, jss.Items) {
		t.Fatalf("secrets: protobuf %d items, JSON %d, or they differ", len(ps.Items), len(jss.Items))
	}
	pn, err := pb.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	jn, err := js.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range jn.Items {
		jn.Items[i].TypeMeta = metav1.TypeMeta{}
	}
	if len(pn.Items) < 2 || !apiequality.Semantic.DeepEqual(pn.Items, jn.Items) {
		t.Fatalf("namespaces: protobuf %d items, JSON %d, or they differ", len(pn.Items), len(jn.Items))
	}
}
