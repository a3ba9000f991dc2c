package integration

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDeleteCollectionNeedsANamespace: DELETE on the all-namespaces path of
// a namespaced kind (/api/v1/secrets) is kube-apiserver's 405
// MethodNotAllowed, over REST and over the gRPC API, and deletes nothing;
// a namespace's collection and a cluster-scoped collection are still
// deleted.
func TestDeleteCollectionNeedsANamespace(t *testing.T) {
	e := newEnv(t, func(c *allinone.Config) { c.GRPCListen = "127.0.0.1:0" })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, ns := range []string{"first", "second"} {
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"purge": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secretsIn := func() []string {
		t.Helper()
		list, err := e.client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range list.Items {
			out = append(out, s.Namespace+"/"+s.Name)
		}
		slices.Sort(out)
		return out
	}
	want := []string{"first/s", "second/s"}

	// REST: client-go's DeleteCollection with no namespace.
	err := e.client.CoreV1().Secrets("").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	var se apierrors.APIStatus
	if !apierrors.IsMethodNotSupported(err) || !asStatus(err, &se) || se.Status().Code != http.StatusMethodNotAllowed ||
		se.Status().Message != "the server does not allow this method on the requested resource" {
		t.Fatalf("DELETE /api/v1/secrets: %v, want kube-apiserver's 405 MethodNotAllowed", err)
	}
	if got := secretsIn(); !slices.Equal(got, want) {
		t.Fatalf("after DELETE /api/v1/secrets: %v, want %v", got, want)
	}

	// gRPC: the same Status, from the ResourceService itself.
	c := resourceClient(t, e.dataDir, e.cp.GRPCAddr.String())
	_, err = c.DeleteCollection(ctx, &apiv1.DeleteCollectionRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "secrets"}, Accept: "application/json"})
	st := apistatus.FromError(err)
	if status.Code(err) != codes.Unimplemented || st.Code != http.StatusMethodNotAllowed || st.Reason != metav1.StatusReasonMethodNotAllowed {
		t.Fatalf("gRPC DeleteCollection of every namespace's secrets: %v (%d %s), want 405 MethodNotAllowed", err, st.Code, st.Reason)
	}
	if got := secretsIn(); !slices.Equal(got, want) {
		t.Fatalf("after the gRPC DeleteCollection: %v, want %v", got, want)
	}

	// One namespace's collection.
	if err := e.client.CoreV1().Secrets("first").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := secretsIn(); !slices.Equal(got, []string{"second/s"}) {
		t.Fatalf("after deleting the secrets of namespace first: %v", got)
	}

	// A cluster-scoped collection (through the gRPC API: namespaces do not
	// serve deletecollection over REST, as in kube-apiserver): the
	// selected namespace starts terminating, the other stays.
	if _, err := c.DeleteCollection(ctx, &apiv1.DeleteCollectionRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "namespaces"}, LabelSelector: "purge=first", Accept: "application/json"}); err != nil {
		t.Fatalf("deletecollection of namespaces: %v", err)
	}
	first, err := e.client.CoreV1().Namespaces().Get(ctx, "first", metav1.GetOptions{})
	if err == nil && first.DeletionTimestamp == nil {
		t.Errorf("namespace first was not deleted: %+v", first.Status)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	second, err := e.client.CoreV1().Namespaces().Get(ctx, "second", metav1.GetOptions{})
	if err != nil || second.DeletionTimestamp != nil {
		t.Errorf("namespace second: %v %v, want it untouched", err, second)
	}
}

// asStatus reports whether err is a Kubernetes Status, and sets se to it.
func asStatus(err error, se *apierrors.APIStatus) bool { return errors.As(err, se) }
