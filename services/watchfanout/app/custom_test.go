package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// widgetCRD is a namespaced CRD of two served versions (v1 stored), whose
// schema defaults spec.color to color, and which selects on spec.color.
func widgetCRD(color string, established bool) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name, crd.UID = "widgets.example.com", types.UID("6d1f0a55-0000-4000-8000-000000000001")
	crd.Spec.Group, crd.Spec.Scope = "example.com", apiextensionsv1.NamespaceScoped
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ListKind: "WidgetList", Singular: "widget"}
	crd.Status.AcceptedNames = crd.Spec.Names
	def := apiextensionsv1.JSON{Raw: []byte(strconv.Quote(color))}
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"size":  {Type: "integer"},
				"color": {Type: "string", Default: &def},
			}},
		},
	}}
	sel := []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}}
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{
		{Name: "v1", Served: true, Storage: true, Schema: schema, SelectableFields: sel},
		{Name: "v1beta1", Served: true, Schema: schema, SelectableFields: sel},
	}
	crd.Status.StoredVersions = []string{"v1"}
	if established {
		crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{
			{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue},
			{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
		}
	}
	return crd
}

func widget(ns, name string, size int64, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": size}}}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Widget")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(labels)
	return u
}

var (
	widgetsV1      = &watchv1.Resource{Group: "example.com", Version: "v1", Resource: "widgets"}
	widgetsV1beta1 = &watchv1.Resource{Group: "example.com", Version: "v1beta1", Resource: "widgets"}
)

// crEvent is a JSON watch frame of a custom resource.
type crEvent struct {
	Type   string                    `json:"type"`
	Object unstructured.Unstructured `json:"object"`
}

// crWatch is an open watch whose frames arrive decoded on events; the
// channel closes when the stream ends, err says how.
type crWatch struct {
	events chan crEvent
	err    error
}

func (e *env) watchCR(t *testing.T, req *watchv1.WatchRequest) (*crWatch, error) {
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	cl, err := e.watch.Watch(ctx, req)
	if err == nil {
		_, err = cl.Recv() // the empty first message
	}
	if err != nil {
		cancel()
		return nil, err
	}
	w := &crWatch{events: make(chan crEvent, 1000)}
	go func() {
		defer close(w.events)
		for {
			resp, err := cl.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					w.err = err
				}
				return
			}
			dec := json.NewDecoder(bytes.NewReader(resp.GetFrames()))
			for {
				var ev struct {
					Type   string          `json:"type"`
					Object json.RawMessage `json:"object"`
				}
				if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					w.err = err
					return
				}
				out := crEvent{Type: ev.Type}
				if err := out.Object.UnmarshalJSON(ev.Object); err != nil {
					w.err = err
					return
				}
				w.events <- out
			}
		}
	}()
	return w, nil
}

func (w *crWatch) next(t *testing.T) crEvent {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if !ok {
			t.Fatalf("watch ended: %v", w.err)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return crEvent{}
}

// expect checks the next event: its type, name, resourceVersion and the
// color it shows.
func (w *crWatch) expect(t *testing.T, typ, name string, rev int64, apiVersion, color string) {
	t.Helper()
	ev := w.next(t)
	got, _, _ := unstructured.NestedString(ev.Object.Object, "spec", "color")
	if ev.Type != typ || ev.Object.GetName() != name || ev.Object.GetResourceVersion() != fmt.Sprint(rev) || ev.Object.GetAPIVersion() != apiVersion || got != color {
		t.Fatalf("got %s %s rv %s %s color %q; want %s %s rv %d %s color %q",
			ev.Type, ev.Object.GetName(), ev.Object.GetResourceVersion(), ev.Object.GetAPIVersion(), got, typ, name, rev, apiVersion, color)
	}
}

// ended waits for the watch to end cleanly (no ERROR frame, no error).
func (w *crWatch) ended(t *testing.T) {
	t.Helper()
	select {
	case ev, ok := <-w.events:
		if ok {
			t.Fatalf("got %s %s, want the watch to end", ev.Type, ev.Object.GetName())
		}
		if w.err != nil {
			t.Fatalf("watch ended with %v, want a clean end", w.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end within 10s")
	}
}

// listCR lists a custom resource in JSON; it returns the names and
// colors of the items and the list's resourceVersion.
func (e *env) listCR(t *testing.T, req *watchv1.ListRequest) (names, colors []string, rv, cont string) {
	t.Helper()
	req.Encoding = watchv1.Encoding_ENCODING_JSON
	resp, err := e.watch.List(t.Context(), req)
	if err != nil {
		t.Fatalf("list %v: %v", req, err)
	}
	var l unstructured.UnstructuredList
	if err := l.UnmarshalJSON(resp.GetData()); err != nil {
		t.Fatalf("list: %v in %s", err, resp.GetData())
	}
	for _, it := range l.Items {
		c, _, _ := unstructured.NestedString(it.Object, "spec", "color")
		names, colors = append(names, it.GetName()), append(colors, c)
	}
	return names, colors, l.GetResourceVersion(), l.GetContinue()
}

// TestCustomResourcesFollowCRDs: the replica serves a CRD's versions from
// the moment it is established, without a restart (the first request
// after the write that established it is served, not 404): watch events
// in revision order with the schema's defaults applied once, in each
// served version; lists (consistent, rv=0, chunked, label and
// selectableFields selectors); a replica started later loads them; a
// change of the CRD's schema ends the watches and serves the new
// defaults; deleting the CRD ends the watches and the resource is gone.
func TestCustomResourcesFollowCRDs(t *testing.T) {
	e := newEnv(t, app.Config{})
	crdRes, _ := registry.New(registry.Standard()...).Lookup(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))

	// Stored but not established: not served.
	e.putObject(crdRes, widgetCRD("blue", false))
	if _, err := e.watchCR(t, &watchv1.WatchRequest{Resource: widgetsV1, Encoding: watchv1.Encoding_ENCODING_JSON}); status.Code(err) != codes.NotFound {
		t.Fatalf("watch of a CRD not established: %v, want NotFound", err)
	}
	established := e.putObject(crdRes, widgetCRD("blue", true))
	w, err := e.watchCR(t, &watchv1.WatchRequest{Resource: widgetsV1, ResourceVersion: fmt.Sprint(established), Encoding: watchv1.Encoding_ENCODING_JSON})
	if err != nil {
		t.Fatalf("watch right after the CRD was established: %v", err)
	}
	wb, err := e.watchCR(t, &watchv1.WatchRequest{Resource: widgetsV1beta1, Namespace: "a", ResourceVersion: fmt.Sprint(established), Encoding: watchv1.Encoding_ENCODING_JSON})
	if err != nil {
		t.Fatal(err)
	}
	wres := registry.CustomResources(widgetCRD("blue", true))[0]
	r1 := e.putObject(wres, widget("a", "one", 1, map[string]string{"tier": "x"}))
	red := widget("b", "two", 2, nil)
	_ = unstructured.SetNestedField(red.Object, "red", "spec", "color")
	r2 := e.putObject(wres, red)
	r3 := e.putObject(wres, widget("a", "one", 3, map[string]string{"tier": "x"}))
	r4 := e.deleteObject(wres, "b", "two")
	w.expect(t, "ADDED", "one", r1, "example.com/v1", "blue")
	w.expect(t, "ADDED", "two", r2, "example.com/v1", "red")
	w.expect(t, "MODIFIED", "one", r3, "example.com/v1", "blue")
	w.expect(t, "DELETED", "two", r4, "example.com/v1", "red")
	wb.expect(t, "ADDED", "one", r1, "example.com/v1beta1", "blue")
	wb.expect(t, "MODIFIED", "one", r3, "example.com/v1beta1", "blue")

	// Not in protobuf, as kube-apiserver serves custom resources.
	if _, err := e.watch.List(t.Context(), &watchv1.ListRequest{Resource: widgetsV1, Encoding: watchv1.Encoding_ENCODING_PROTOBUF}); apiStatus(t, err).GetCode() != 406 {
		t.Errorf("protobuf list: %v, want 406", err)
	}
	r5 := e.putObject(wres, widget("b", "three", 5, nil))
	w.expect(t, "ADDED", "three", r5, "example.com/v1", "blue")
	for _, tc := range []struct {
		req   *watchv1.ListRequest
		names string
	}{
		{&watchv1.ListRequest{Resource: widgetsV1}, "[one three]"},
		{&watchv1.ListRequest{Resource: widgetsV1, ResourceVersion: "0"}, "[one three]"},
		{&watchv1.ListRequest{Resource: widgetsV1beta1, Namespace: "b"}, "[three]"},
		{&watchv1.ListRequest{Resource: widgetsV1, LabelSelector: "tier=x"}, "[one]"},
		{&watchv1.ListRequest{Resource: widgetsV1, FieldSelector: "spec.color=blue"}, "[one three]"},
		{&watchv1.ListRequest{Resource: widgetsV1, FieldSelector: "spec.color=red"}, "[]"},
	} {
		names, colors, rv, _ := e.listCR(t, tc.req)
		if fmt.Sprint(names) != tc.names || rv == "" {
			t.Errorf("list %v: %v at %q, want %s", tc.req, names, rv, tc.names)
		}
		for _, c := range colors {
			if c != "blue" {
				t.Errorf("list %v: color %q, want the default blue", tc.req, c)
			}
		}
	}
	first, _, rv, cont := e.listCR(t, &watchv1.ListRequest{Resource: widgetsV1, Limit: 1})
	rest, _, rv2, _ := e.listCR(t, &watchv1.ListRequest{Resource: widgetsV1, Limit: 1, ContinueToken: cont})
	if fmt.Sprint(first, rest) != "[one] [three]" || rv != rv2 || cont == "" {
		t.Errorf("chunked list: %v (continue %q) then %v, at %s and %s", first, cont, rest, rv, rv2)
	}

	// A replica started now loads the custom resources with the rest.
	e.stopFanout()
	e.startFanout("127.0.0.1:0")
	if names, _, _, _ := e.listCR(t, &watchv1.ListRequest{Resource: widgetsV1}); fmt.Sprint(names) != "[one three]" {
		t.Errorf("list after a restart: %v", names)
	}
	w, err = e.watchCR(t, &watchv1.WatchRequest{Resource: widgetsV1, ResourceVersion: fmt.Sprint(r5), Encoding: watchv1.Encoding_ENCODING_JSON})
	if err != nil {
		t.Fatal(err)
	}

	// A status-only change keeps the watch; a new default ends it, and
	// the objects read since show the new default.
	st := widgetCRD("blue", true)
	st.Status.StoredVersions = []string{"v1", "v1beta1"}
	e.putObject(crdRes, st)
	r6 := e.putObject(wres, widget("a", "four", 6, nil))
	w.expect(t, "ADDED", "four", r6, "example.com/v1", "blue")
	e.putObject(crdRes, widgetCRD("green", true))
	w.ended(t)
	if names, colors, _, _ := e.listCR(t, &watchv1.ListRequest{Resource: widgetsV1}); fmt.Sprint(names, colors) != "[four one three] [green green green]" {
		t.Errorf("list after the default changed: %v %v", names, colors)
	}
	w, err = e.watchCR(t, &watchv1.WatchRequest{Resource: widgetsV1, Encoding: watchv1.Encoding_ENCODING_JSON})
	if err != nil {
		t.Fatal(err)
	}
	// RV unset: the current state first, as ADDED events.
	for _, name := range []string{"four", "one", "three"} {
		if ev := w.next(t); ev.Type != "ADDED" || ev.Object.GetName() != name || ev.Object.GetAPIVersion() != "example.com/v1" {
			t.Fatalf("initial event %s %s %s, want ADDED %s", ev.Type, ev.Object.GetName(), ev.Object.GetAPIVersion(), name)
		} else if c, _, _ := unstructured.NestedString(ev.Object.Object, "spec", "color"); c != "green" {
			t.Fatalf("initial event of %s: color %q, want the new default green", name, c)
		}
	}
	r7 := e.putObject(wres, widget("a", "five", 7, nil))
	w.expect(t, "ADDED", "five", r7, "example.com/v1", "green")

	// Deleted: the watch ends, the resource is gone.
	e.deleteObject(crdRes, "", "widgets.example.com")
	w.ended(t)
	if _, err := e.watch.List(t.Context(), &watchv1.ListRequest{Resource: widgetsV1, Encoding: watchv1.Encoding_ENCODING_JSON}); status.Code(err) != codes.NotFound {
		t.Fatalf("list after the CRD was deleted: %v, want NotFound", err)
	}
}

// TestCustomResourceJSONListsAreDecodedEncoded: the items of a JSON list
// of custom resources, written from each object's memoized JSON, are byte
// for byte those of the list of the decoded objects (with their schema's
// defaults) encoded, with empty apiVersion and kind as the gateway's
// store path writes them, whole and streamed, before and after a watch
// memoized the objects. (The envelope is watchfanout's own, members in
// kube-apiserver's order; its metadata is checked.)
func TestCustomResourceJSONListsAreDecodedEncoded(t *testing.T) {
	e := newEnv(t, app.Config{})
	crdRes, _ := registry.New(registry.Standard()...).Lookup(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	e.putObject(crdRes, widgetCRD("blue", true))
	wres := registry.CustomResources(widgetCRD("blue", true))[0]
	red := widget("a", "two", 2, nil)
	_ = unstructured.SetNestedField(red.Object, "red", "spec", "color")
	objs := []*unstructured.Unstructured{widget("a", "one", 1, map[string]string{"tier": "x"}), red, widget("b", "three", 3, nil)}
	var revs []int64
	for _, o := range objs {
		revs = append(revs, e.putObject(wres, o))
	}
	last := revs[len(revs)-1]
	var items []runtime.Object
	for i, o := range objs {
		obj := e.decodedAt(wres, o, revs[i])
		wres.DefaultOnRead(obj)
		items = append(items, obj)
	}
	want := e.encodedList(wres, items, metav1.ListMeta{ResourceVersion: strconv.FormatInt(last, 10)}, negotiation.JSON)
	if !bytes.Contains(want, []byte(`"items":[{"apiVersion":"","kind":"","metadata"`)) {
		t.Fatalf("the decoded list's items are not of the shape this test expects: %s", want)
	}
	req := &watchv1.ListRequest{Resource: widgetsV1, ResourceVersion: strconv.FormatInt(last, 10), ResourceVersionMatch: "NotOlderThan", Encoding: watchv1.Encoding_ENCODING_JSON}
	for round := range 2 {
		whole, err := e.watch.List(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		streamed, _ := e.streamList(t.Context(), req)
		for name, got := range map[string][]byte{"List": whole.GetData(), "StreamList": streamed.GetData()} {
			g, w := listItems(t, got), listItems(t, want)
			if !bytes.Equal(g.Items, w.Items) || g.Metadata.ResourceVersion != strconv.FormatInt(last, 10) {
				t.Errorf("round %d: %s differs from the decoded list encoded:\n got %s\nwant %s", round, name, got, want)
			}
		}
		if round == 0 {
			// A watch from the start memoizes every object's ADDED frame.
			w, err := e.watchCR(t, &watchv1.WatchRequest{Resource: widgetsV1, ResourceVersion: "0", Encoding: watchv1.Encoding_ENCODING_JSON})
			if err != nil {
				t.Fatal(err)
			}
			for range objs {
				w.next(t)
			}
		}
	}
}

// rawList is a JSON list with its items as they were written.
type rawList struct {
	Metadata metav1.ListMeta `json:"metadata"`
	Items    json.RawMessage `json:"items"`
}

func listItems(t *testing.T, data []byte) rawList {
	t.Helper()
	var l rawList
	if err := json.Unmarshal(data, &l); err != nil {
		t.Fatalf("list: %v in %s", err, data)
	}
	return l
}
