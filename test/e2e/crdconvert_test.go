package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/crdconvert/crdconverttest"
	"github.com/meridian-cp/meridian/lib/kube/webhook/webhooktest"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// gizmoCRD serves Gizmos at v1 (stored; spec.size, a string) and v2
// (spec.replicas, an integer), converted by the webhook at url.
func gizmoCRD(url string, ca []byte) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gizmos.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gizmos, singular: gizmo, kind: Gizmo}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1]
      clientConfig:
        url: %s
        caBundle: %s
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: string}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              replicas: {type: integer}
`, url, base64.StdEncoding.EncodeToString(ca))
}

// TestCRDConversionWebhook: a CRD whose two versions have different
// shapes, converted by a webhook the test serves over HTTPS (verified
// with the CRD's caBundle). kubectl reads an object at either version,
// creates one at the version that is not stored, lists and watches at
// it; a webhook that refuses, or is gone, makes reads at the other
// version a 500 with the webhook's message, while the stored version is
// still served.
func TestCRDConversionWebhook(t *testing.T) {
	requireKubectl(t)
	var refuse atomic.Bool
	var calls, largest atomic.Int32
	srv := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		var rev apiextensionsv1.ConversionReview
		if json.Unmarshal(body, &rev) == nil && rev.Request != nil && int32(len(rev.Request.Objects)) > largest.Load() {
			largest.Store(int32(len(rev.Request.Objects)))
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		crdconverttest.Handler(func(obj map[string]any, v string) error {
			if refuse.Load() {
				return errors.New("gizmos are not convertible today")
			}
			return crdconverttest.SizeReplicas(obj, v)
		}).ServeHTTP(w, r)
	}))
	cp := start(t, "")
	cp.createNamespace("conv")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", gizmoCRD(srv.URL+"/convert", srv.CABundle)))
	cp.waitEstablished("gizmos.example.com")

	cp.kubectl("-n", "conv", "apply", "-f", manifest(t, "a.yaml", "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: a}\nspec: {size: \"3\"}\n"))
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v2.example.com", "a", "-o", "jsonpath={.apiVersion} {.spec.replicas} {.spec.size}"); got != "example.com/v2 3 " {
		t.Errorf("a at v2: %q, want \"example.com/v2 3 \"", got)
	}
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "a", "-o", "jsonpath={.apiVersion} {.spec.size}"); got != "example.com/v1 3" {
		t.Errorf("a at v1: %q", got)
	}

	// Created at v2: stored at v1 (read back through v1 as a size), and
	// returned at v2.
	if got := cp.kubectl("-n", "conv", "create", "-o", "jsonpath={.spec.replicas}", "-f", manifest(t, "b.yaml", "apiVersion: example.com/v2\nkind: Gizmo\nmetadata: {name: b}\nspec: {replicas: 5}\n")); got != "5" {
		t.Errorf("create at v2 answered replicas %q", got)
	}
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "b", "-o", "jsonpath={.spec.size}"); got != "5" {
		t.Errorf("b at v1: size %q, want \"5\"", got)
	}
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v2.example.com", "-o", "jsonpath={range .items[*]}{.apiVersion}:{.metadata.name}={.spec.replicas} {end}"); got != "example.com/v2:a=3 example.com/v2:b=5 " {
		t.Errorf("list at v2: %q", got)
	}
	if n := largest.Load(); n < 2 {
		t.Errorf("the list at v2 was converted in reviews of %d object(s), want one review of both", n)
	}

	// A watch at v2 sees a change written at v1 in v2's shape.
	dyn, err := dynamic.NewForConfig(cp.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gizmosV2 := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gizmos"}).Namespace("conv")
	w, err := gizmosV2.Watch(ctx, metav1.ListOptions{ResourceVersion: cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "a", "-o", "jsonpath={.metadata.resourceVersion}")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cp.kubectl("-n", "conv", "patch", "gizmos.v1.example.com", "a", "--type=merge", "-p", `{"spec":{"size":"7"}}`)
	for seen := false; !seen; {
		select {
		case ev := <-w.ResultChan():
			u, _ := ev.Object.(*unstructured.Unstructured)
			if u == nil || u.GetName() != "a" {
				continue // b's creation comes first
			}
			seen = true
			if n, _, _ := unstructured.NestedInt64(u.UnstructuredContent(), "spec", "replicas"); ev.Type != watch.Modified || u.GetAPIVersion() != "example.com/v2" || n != 7 {
				t.Errorf("watch at v2: %s %v", ev.Type, ev.Object)
			}
		case <-ctx.Done():
			t.Fatal("no watch event for a at v2")
		}
	}
	if calls.Load() == 0 {
		t.Fatal("the webhook was never called")
	}

	// A webhook that refuses: reads at v2 are a 500 with its message;
	// v1, the stored version, needs no conversion.
	refuse.Store(true)
	_, errOut, err := cp.kubectlErr("-n", "conv", "get", "gizmos.v2.example.com", "a")
	if err == nil || !strings.Contains(errOut, "Internal error occurred: conversion webhook for example.com/v1, Kind=Gizmo failed: gizmos are not convertible today") {
		t.Errorf("get at v2 with a refusing webhook: %v %q", err, errOut)
	}
	cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "a")

	// A webhook that is gone: a 500 naming the call's failure, at once.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + l.Addr().String() + "/convert"
	l.Close()
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", gizmoCRD(dead, srv.CABundle)))
	eventually(t, func() string {
		out, errOut, err := cp.kubectlErr("-n", "conv", "get", "gizmos.v2.example.com", "b", "-o", "name")
		if err == nil || !strings.Contains(errOut, "conversion webhook for example.com/v1, Kind=Gizmo failed: failed to call webhook: Post \""+dead+"\"") || !strings.Contains(errOut, "connection refused") {
			return fmt.Sprintf("get at v2 with a dead webhook: %v %q %q", err, out, errOut)
		}
		return ""
	})
	if _, errOut, err := cp.kubectlErr("-n", "conv", "create", "-f", manifest(t, "c.yaml", "apiVersion: example.com/v2\nkind: Gizmo\nmetadata: {name: c}\nspec: {replicas: 1}\n")); err == nil || !strings.Contains(errOut, "InternalError") && !strings.Contains(errOut, "Internal error occurred") {
		t.Errorf("create at v2 with a dead webhook: %v %q", err, errOut)
	}
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "-o", "name"); strings.Contains(got, "gizmo.example.com/c") {
		t.Errorf("a create that failed to convert was stored: %q", got)
	}
}

// TestCRDApplyAcrossWebhookConversion: server-side apply compares each
// managedFields entry at its own version, converting the object there
// through the CRD's conversion webhook, as kube-apiserver does. A manager
// that set spec.size through v1 conflicts with an apply of spec.replicas
// through v2 (the same field once converted); --force-conflicts takes it
// over, and each version reads the new value.
func TestCRDApplyAcrossWebhookConversion(t *testing.T) {
	requireKubectl(t)
	var calls atomic.Int32
	srv := webhooktest.Start(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		crdconverttest.Handler(crdconverttest.SizeReplicas).ServeHTTP(w, r)
	}))
	cp := start(t, "")
	cp.createNamespace("conv")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", gizmoCRD(srv.URL+"/convert", srv.CABundle)))
	cp.waitEstablished("gizmos.example.com")

	cp.kubectl("-n", "conv", "apply", "--server-side", "--field-manager=old", "-f", manifest(t, "old.yaml", "apiVersion: example.com/v1\nkind: Gizmo\nmetadata: {name: shared}\nspec: {size: \"3\"}\n"))
	before := calls.Load()
	newer := manifest(t, "new.yaml", "apiVersion: example.com/v2\nkind: Gizmo\nmetadata: {name: shared}\nspec: {replicas: 4}\n")
	if _, errOut, err := cp.kubectlErr("-n", "conv", "apply", "--server-side", "--field-manager=new", "-f", newer); err == nil || !strings.Contains(errOut, `conflict with "old"`) || !strings.Contains(errOut, ".spec.size") {
		t.Errorf("apply through v2 over a v1 manager's field: %v %s, want a conflict with \"old\" on .spec.size", err, errOut)
	}
	if calls.Load() == before {
		t.Error("the conflicting apply did not call the conversion webhook")
	}
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "shared", "-o", "jsonpath={.spec.size}"); got != "3" {
		t.Errorf("after the refused apply: size %q, want \"3\"", got)
	}

	cp.kubectl("-n", "conv", "apply", "--server-side", "--field-manager=new", "--force-conflicts", "-f", newer)
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v2.example.com", "shared", "--show-managed-fields", "-o", `jsonpath={.spec.replicas} {range .metadata.managedFields[*]}{.manager}={.apiVersion} {.fieldsV1} {end}`); got != `4 new=example.com/v2 {"f:spec":{"f:replicas":{}}} ` {
		t.Errorf("after the forced apply, at v2: %q", got)
	}
	if got := cp.kubectl("-n", "conv", "get", "gizmos.v1.example.com", "shared", "-o", "jsonpath={.spec.size}"); got != "4" {
		t.Errorf("after the forced apply, at v1: size %q, want \"4\"", got)
	}
}
