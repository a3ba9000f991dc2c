package crdconvert_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/crdconvert/crdconverttest"
	"github.com/meridian-cp/meridian/lib/kube/webhook"
	"github.com/meridian-cp/meridian/lib/kube/webhook/webhooktest"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func crd(url string, ca []byte) *apiextensionsv1.CustomResourceDefinition {
	c := &apiextensionsv1.CustomResourceDefinition{}
	c.Spec.Group = "example.com"
	c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{ConversionReviewVersions: []string{"v1"},
			ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: &url, CABundle: ca}}}
	return c
}

func widget(version, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/" + version, "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "default", "uid": "u-" + name, "resourceVersion": "7",
			"labels": map[string]any{"app": "w"}},
		"spec": spec,
	}}
}

func TestNoneChangesOnlyAPIVersion(t *testing.T) {
	c := &apiextensionsv1.CustomResourceDefinition{}
	c.Spec.Group = "example.com"
	o := widget("v1", "a", map[string]any{"size": "3"})
	if err := crdconvert.New(nil, 0).Convert(context.Background(), c, []*unstructured.Unstructured{o}, "v2"); err != nil {
		t.Fatal(err)
	}
	if o.GetAPIVersion() != "example.com/v2" || o.Object["spec"].(map[string]any)["size"] != "3" {
		t.Fatalf("got %v", o.Object)
	}
}

func TestWebhookConvertsInOneReview(t *testing.T) {
	var calls atomic.Int32
	srv := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		crdconverttest.Handler(crdconverttest.SizeReplicas).ServeHTTP(w, r)
	}))
	conv := crdconvert.New(webhook.New(webhook.Options{}), 0)
	objs := []*unstructured.Unstructured{
		widget("v1", "a", map[string]any{"size": "3"}),
		widget("v2", "b", map[string]any{"replicas": int64(5)}),
		widget("v1", "c", map[string]any{"size": "4"}),
	}
	if err := conv.Convert(context.Background(), crd(srv.URL, srv.CABundle), objs, "v2"); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d webhook calls, want 1", n)
	}
	for i, want := range []int64{3, 5, 4} {
		got, _, _ := unstructured.NestedInt64(objs[i].Object, "spec", "replicas")
		if got != want || objs[i].GetAPIVersion() != "example.com/v2" {
			t.Errorf("object %d: %v", i, objs[i].Object)
		}
		if objs[i].GetResourceVersion() != "7" || objs[i].GetLabels()["app"] != "w" {
			t.Errorf("object %d lost its metadata: %v", i, objs[i].Object["metadata"])
		}
	}
}

func TestWebhookErrors(t *testing.T) {
	tamper := func(f func(rev map[string]any)) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := httptest.NewRecorder()
			crdconverttest.Handler(crdconverttest.SizeReplicas).ServeHTTP(rec, r)
			rev := map[string]any{}
			_ = json.Unmarshal(rec.Body.Bytes(), &rev)
			f(rev)
			_ = json.NewEncoder(w).Encode(rev)
		})
	}
	objects := func(rev map[string]any) []any { return rev["response"].(map[string]any)["convertedObjects"].([]any) }
	objMeta := func(rev map[string]any) map[string]any {
		return objects(rev)[0].(map[string]any)["metadata"].(map[string]any)
	}
	cases := []struct {
		name string
		h    http.Handler
		want string
	}{
		{"failure message", crdconverttest.Handler(func(map[string]any, string) error { return fmt.Errorf("cannot convert widgets today") }),
			`conversion webhook for example.com/v1, Kind=Widget failed: cannot convert widgets today`},
		{"wrong uid", tamper(func(rev map[string]any) { rev["response"].(map[string]any)["uid"] = "x" }), `expected response.uid="`},
		{"wrong kind of review", tamper(func(rev map[string]any) { rev["kind"] = "AdmissionReview" }), `expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview`},
		{"too few objects", tamper(func(rev map[string]any) { rev["response"].(map[string]any)["convertedObjects"] = []any{} }), `failed: no objects returned`},
		{"name changed", tamper(func(rev map[string]any) { objMeta(rev)["name"] = "other" }), `returned invalid object: must have the same name: a != other`},
		{"uid changed", tamper(func(rev map[string]any) { objMeta(rev)["uid"] = "other" }), `must have the same UID`},
		{"wrong version", tamper(func(rev map[string]any) { objects(rev)[0].(map[string]any)["apiVersion"] = "example.com/v3" }),
			`invalid groupVersion (expected example.com/v2, received example.com/v3)`},
		{"invalid label", tamper(func(rev map[string]any) { objMeta(rev)["labels"] = map[string]any{"bad key!": "v"} }), `metadata.labels: Invalid value: "bad key!"`},
		{"not 200", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) }),
			`the server responded with 503`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := webhooktest.Start(t, tc.h)
			o := widget("v1", "a", map[string]any{"size": "3"})
			before, _ := json.Marshal(o.Object)
			err := crdconvert.New(webhook.New(webhook.Options{}), 0).Convert(context.Background(), crd(srv.URL, srv.CABundle), []*unstructured.Unstructured{o}, "v2")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if after, _ := json.Marshal(o.Object); string(after) != string(before) {
				t.Fatalf("a failed conversion changed the object: %s", after)
			}
		})
	}
}

func TestWebhookMetadataRestored(t *testing.T) {
	srv := webhooktest.Start(t, crdconverttest.Handler(func(obj map[string]any, v string) error {
		md := obj["metadata"].(map[string]any)
		md["resourceVersion"] = "999"
		md["labels"] = map[string]any{"app": "w", "converted": "yes"}
		md["annotations"] = map[string]any{"note": "x"}
		return crdconverttest.SizeReplicas(obj, v)
	}))
	o := widget("v1", "a", map[string]any{"size": "3"})
	if err := crdconvert.New(webhook.New(webhook.Options{}), 0).Convert(context.Background(), crd(srv.URL, srv.CABundle), []*unstructured.Unstructured{o}, "v2"); err != nil {
		t.Fatal(err)
	}
	if o.GetResourceVersion() != "7" || o.GetLabels()["converted"] != "yes" || o.GetAnnotations()["note"] != "x" {
		t.Fatalf("metadata %v: want resourceVersion kept, labels and annotations from the webhook", o.Object["metadata"])
	}
}

func TestDeadAndSlowWebhooks(t *testing.T) {
	block := make(chan struct{})
	slow := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer close(block)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "https://" + l.Addr().String() + "/convert"
	l.Close() // nothing listens there now
	conv := crdconvert.New(webhook.New(webhook.Options{}), 300*time.Millisecond)
	for _, tc := range []struct {
		name, url, want string
		timeout         bool
	}{
		{"slow", slow.URL, "context deadline exceeded", true},
		{"dead", deadURL, "connection refused", false},
	} {
		o := widget("v1", "a", map[string]any{"size": "3"})
		err := conv.Convert(context.Background(), crd(tc.url, slow.CABundle), []*unstructured.Unstructured{o}, "v2")
		var we *webhook.Error
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &we) || we.Timeout != tc.timeout {
			t.Errorf("%s webhook: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}
