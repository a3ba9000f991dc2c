package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestJSONPatchLimits: a JSON patch whose "copy" operations add more than
// kube-apiserver's 3 MiB is a 422 as soon as they do (doubling copies would
// otherwise build a document of 2^n times the object), and a patched
// object larger than a request body may be is a 413; neither changes what
// is stored.
func TestJSONPatchLimits(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	orig, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "doubled"}, Data: map[string]string{"k": strings.Repeat("x", 1024)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// 17 copies of the document's data into itself, each doubling it: 128
	// MiB from a 1 KiB object and a 1.5 KB patch.
	var ops []map[string]any
	for i := range 17 {
		ops = append(ops, map[string]any{"op": "copy", "from": "/data", "path": fmt.Sprintf("/data/c%d", i)})
	}
	doubling, _ := json.Marshal(ops)
	_, err = cms.Patch(ctx, "doubled", types.JSONPatchType, doubling, metav1.PatchOptions{})
	var se apierrors.APIStatus
	if !asStatus(err, &se) || se.Status().Code != http.StatusUnprocessableEntity || se.Status().Reason != metav1.StatusReasonInvalid ||
		!strings.Contains(se.Status().Message, "copies too much") {
		t.Errorf("doubling copies: %v, want 422 Invalid for the copy limit", err)
	}

	// One copy of 1.6 MiB (under the copy limit) into an object of 1.6 MiB:
	// 3.2 MiB, more than the 3 MiB a PUT body may hold.
	big := strings.Repeat("b", 1600<<10)
	grow, _ := json.Marshal([]map[string]any{
		{"op": "add", "path": "/data/big", "value": big},
		{"op": "copy", "from": "/data/big", "path": "/data/again"},
	})
	_, err = cms.Patch(ctx, "doubled", types.JSONPatchType, grow, metav1.PatchOptions{})
	if !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("a 3.2 MiB patched object: %v, want 413 RequestEntityTooLarge", err)
	}

	got, err := cms.Get(ctx, "doubled", metav1.GetOptions{})
	if err != nil || got.ResourceVersion != orig.ResourceVersion {
		t.Errorf("the refused patches changed the object: %v %v", err, got.ResourceVersion)
	}
}

// TestMalformedStrategicMergePatch: a malformed strategic merge patch
// directive, one of which panics inside the patch library, is a 400 or 422
// Status whose message holds nothing of Go's internals, over REST and over
// the gRPC API, and changes nothing.
func TestMalformedStrategicMergePatch(t *testing.T) {
	e := newEnv(t, func(c *allinone.Config) { c.GRPCListen = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	orig, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "smp", Finalizers: []string{"example.com/f"}}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := resourceClient(t, e.dataDir, e.cp.GRPCAddr.String())
	for _, patch := range []string{
		`{"data":{"$retainKeys":[1,{}]}}`,
		`{"$retainKeys":[{}]}`,
		`{"metadata":{"$retainKeys":"x"}}`,
		`{"data":{"$patch":1}}`,
		`{"metadata":{"$setElementOrder/finalizers":{}}}`,
		`{"metadata":{"$deleteFromPrimitiveList/finalizers":[{}]}}`,
		`{"metadata":{"ownerReferences":[{"$patch":"delete"}]}}`,
		`{"data":[]}`,
	} {
		_, restErr := cms.Patch(ctx, "smp", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		_, grpcErr := c.Patch(ctx, &apiv1.PatchRequest{
			Ref:    &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "smp"},
			Body:   &httpbody.HttpBody{ContentType: "application/strategic-merge-patch+json", Data: []byte(patch)},
			Accept: "application/json",
		})
		for via, err := range map[string]error{"REST": restErr, "gRPC": grpcErr} {
			if err == nil {
				continue // a directive the library accepts
			}
			st := apistatus.FromError(err)
			if st.Code != http.StatusBadRequest && st.Code != http.StatusUnprocessableEntity {
				t.Errorf("%s %s: %d %s: %s, want 400 or 422", via, patch, st.Code, st.Reason, st.Message)
			}
			for _, internal := range []string{"panic", "goroutine", "runtime error", ".go:"} {
				if strings.Contains(st.Message, internal) {
					t.Errorf("%s %s: the message holds %q: %s", via, patch, internal, st.Message)
				}
			}
		}
	}
	_, err = cms.Patch(ctx, "smp", types.StrategicMergePatchType, []byte(`{"data":{"$retainKeys":[1,{}]}}`), metav1.PatchOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("$retainKeys holding an object: %v, want 400 BadRequest", err)
	}
	got, err := cms.Get(ctx, "smp", metav1.GetOptions{})
	if err != nil || got.ResourceVersion != orig.ResourceVersion {
		t.Errorf("the malformed patches changed the object: %v %v", err, got.ResourceVersion)
	}
}
