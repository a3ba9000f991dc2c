package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestClientGo does the round trip through kubernetes.Interface, in JSON
// and in protobuf.
func TestClientGo(t *testing.T) {
	cp := start(t, "")
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			cfg := cp.restConfig()
			cfg.ContentType = ct
			c, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c)
		})
	}
}

// TestOpenAPI reads the OpenAPI documents the way client-go does.
func TestOpenAPI(t *testing.T) {
	cp := start(t, "")
	c := cp.client()
	doc, err := c.Discovery().OpenAPISchema()
	if err != nil {
		t.Fatalf("OpenAPI v2 (protobuf): %v", err)
	}
	found := false
	for _, d := range doc.GetDefinitions().GetAdditionalProperties() {
		if d.GetName() == "io.k8s.api.core.v1.ConfigMap" {
			found = true
		}
	}
	if !found {
		t.Error("OpenAPI v2 has no io.k8s.api.core.v1.ConfigMap definition")
	}
	paths, err := c.Discovery().OpenAPIV3().Paths()
	if err != nil {
		t.Fatal(err)
	}
	gv, ok := paths["api/v1"]
	if !ok {
		t.Fatalf("OpenAPI v3 paths: %v", paths)
	}
	schema, err := gv.Schema("application/json")
	if err != nil || !strings.Contains(string(schema), `"io.k8s.api.core.v1.ConfigMap"`) {
		t.Errorf("OpenAPI v3 api/v1: %v", err)
	}
}

func roundTrip(t *testing.T, c kubernetes.Interface) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nsName := "cg-" + randomName()
	ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Status.Phase != corev1.NamespaceActive || ns.UID == "" || ns.ResourceVersion == "" {
		t.Errorf("namespace: %+v", ns)
	}
	// The namespace's kube-root-ca.crt comes first, so that the watch
	// below sees only this test's changes.
	for {
		if _, err := c.CoreV1().ConfigMaps(nsName).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no kube-root-ca.crt in %s", nsName)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cms := c.CoreV1().ConfigMaps(nsName)

	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{"tier": "web"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Namespace != nsName || cm.UID == "" || cm.CreationTimestamp.IsZero() {
		t.Errorf("created: %+v", cm.ObjectMeta)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v, want AlreadyExists", err)
	}
	got, err := cms.Get(ctx, "app", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" || got.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("get: %v %+v", err, got)
	}

	got.Data["k"] = "v2"
	upd, err := cms.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if mustInt(t, upd.ResourceVersion) <= mustInt(t, got.ResourceVersion) {
		t.Errorf("update did not advance resourceVersion: %s -> %s", got.ResourceVersion, upd.ResourceVersion)
	}
	got.Data["k"] = "stale"
	if _, err := cms.Update(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale update: %v, want Conflict", err)
	}

	sel, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "tier=web"})
	if err != nil || len(sel.Items) != 1 {
		t.Errorf("label selector list: %v %d items", err, len(sel.Items))
	}
	if none, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "tier=db"}); err != nil || len(none.Items) != 0 {
		t.Errorf("non-matching selector: %v %+v", err, none)
	}

	if err := cms.Delete(ctx, "app", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "app", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: %v, want NotFound", err)
	}

	var types []watch.EventType
	var rvs []int64
	for len(types) < 3 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %v", types)
			}
			obj, isCM := ev.Object.(*corev1.ConfigMap)
			if !isCM {
				t.Fatalf("watch event %s carries %T", ev.Type, ev.Object)
			}
			types = append(types, ev.Type)
			rvs = append(rvs, mustInt(t, obj.ResourceVersion))
		case <-ctx.Done():
			t.Fatalf("watch saw only %v", types)
		}
	}
	if types[0] != watch.Added || types[1] != watch.Modified || types[2] != watch.Deleted {
		t.Errorf("watch events %v, want ADDED MODIFIED DELETED", types)
	}
	if !(rvs[0] < rvs[1] && rvs[1] < rvs[2]) {
		t.Errorf("watch resourceVersions not increasing: %v", rvs)
	}

	// Secrets fold stringData into data.
	sec, err := c.CoreV1().Secrets(nsName).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pw"}, StringData: map[string]string{"password": "hunter2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["password"]) != "hunter2" || sec.Type != corev1.SecretTypeOpaque || len(sec.StringData) != 0 {
		t.Errorf("secret: type=%s data=%v stringData=%v", sec.Type, sec.Data, sec.StringData)
	}

	// Invalid objects are 422 with a cause per field, and nothing is stored.
	_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name"}, Data: map[string]string{"bad key!": "x"}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Errorf("invalid configmap: %v, want Invalid", err)
	} else if st := err.(apierrors.APIStatus).Status(); st.Details == nil || len(st.Details.Causes) < 2 {
		t.Errorf("invalid configmap: want a cause per bad field, got %+v", st.Details)
	}
	// Creating into a namespace that does not exist is 404.
	if _, err := c.CoreV1().ConfigMaps("no-such-ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("create in a missing namespace: %v, want NotFound", err)
	}
}

// TestBadInput sends malformed requests: each gets a Status error with the
// right code, and none changes what is stored.
func TestBadInput(t *testing.T) {
	cp := start(t, "")
	c := cp.client()
	ctx := context.Background()
	before, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw := c.CoreV1().RESTClient()
	cases := []struct {
		name   string
		req    *rest.Request
		code   int
		reason metav1.StatusReason
	}{
		{"malformed JSON", raw.Post().Namespace("default").Resource("configmaps").SetHeader("Content-Type", "application/json").Body([]byte(`{"kind":"ConfigMap",`)), 400, metav1.StatusReasonBadRequest},
		{"wrong kind", raw.Post().Namespace("default").Resource("configmaps").SetHeader("Content-Type", "application/json").Body([]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}`)), 400, metav1.StatusReasonBadRequest},
		{"namespace mismatch", raw.Post().Namespace("default").Resource("configmaps").SetHeader("Content-Type", "application/json").Body([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"kube-system"}}`)), 400, metav1.StatusReasonBadRequest},
		{"unsupported body type", raw.Post().Namespace("default").Resource("configmaps").SetHeader("Content-Type", "text/plain").Body([]byte(`hello`)), 415, metav1.StatusReasonUnsupportedMediaType},
		{"bad label selector", raw.Get().Namespace("default").Resource("configmaps").Param("labelSelector", "a in (b"), 400, metav1.StatusReasonBadRequest},
		{"bad field selector", raw.Get().Namespace("default").Resource("configmaps").Param("fieldSelector", "data.k=v"), 400, metav1.StatusReasonBadRequest},
		{"bad limit", raw.Get().Namespace("default").Resource("configmaps").Param("limit", "many"), 400, metav1.StatusReasonBadRequest},
		{"bad resourceVersion", raw.Get().Namespace("default").Resource("configmaps").Param("resourceVersion", "yesterday"), 400, metav1.StatusReasonBadRequest},
		{"unknown resource", raw.Get().Namespace("default").Resource("widgets"), 404, metav1.StatusReasonNotFound},
		{"bad dryRun", raw.Post().Namespace("default").Resource("configmaps").Param("dryRun", "Some").SetHeader("Content-Type", "application/json").Body([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)), 400, metav1.StatusReasonBadRequest},
	}
	for _, tc := range cases {
		res := tc.req.Do(ctx)
		var code int
		res.StatusCode(&code)
		err := res.Error()
		st, ok := err.(apierrors.APIStatus)
		if !ok {
			t.Errorf("%s: error %v (%T) is not a Status", tc.name, err, err)
			continue
		}
		if code != tc.code || st.Status().Reason != tc.reason {
			t.Errorf("%s: %d %s (%s), want %d %s", tc.name, code, st.Status().Reason, st.Status().Message, tc.code, tc.reason)
		}
	}
	// A body over the size limit is 413 (to alice, whom a Role lets create
	// config maps: the body of a request she may not make is not read).
	cp.grant("default", "alice-writes", "alice", "create", "configmaps")
	big := bytes.Repeat([]byte("x"), 4<<20)
	req, _ := http.NewRequest(http.MethodPost, cp.url("/api/v1/namespaces/default/configmaps"), bytes.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer e2e-token-alice")
	resp, err := cp.anonymousHTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st metav1.Status
	if resp.StatusCode != http.StatusRequestEntityTooLarge || json.Unmarshal(body, &st) != nil || st.Reason != metav1.StatusReasonRequestEntityTooLarge {
		t.Errorf("oversized body: %d %s", resp.StatusCode, body)
	}
	after, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Items) != len(before.Items) {
		t.Errorf("bad requests stored objects: %d before, %d after", len(before.Items), len(after.Items))
	}
}

func randomName() string { return strconv.FormatInt(time.Now().UnixNano(), 36) }
