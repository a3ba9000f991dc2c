package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// systemNamespaces exist in every cluster; kubectl's default namespace is
// "default".
var systemNamespaces = []string{"default", "kube-system", "kube-public", "kube-node-lease"}

// ensureNamespaces creates the system namespaces that are missing. Gateways
// starting together race safely: create is a compare-and-swap.
func ensureNamespaces(ctx context.Context, store *storage.Store, c *codec.Codec, reg *registry.Registry) error {
	res, _ := reg.Lookup(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	for _, name := range systemNamespaces {
		ns := &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, UID: types.UID(uuid.NewString()), CreationTimestamp: metav1.NewTime(time.Now().Truncate(time.Second)),
				Labels: map[string]string{corev1.LabelMetadataName: name},
			},
			Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		}
		data, err := c.EncodeStorage(ns)
		if err != nil {
			return err
		}
		if _, err := store.Create(ctx, res.Key("", name), data, storage.Parent{}, 0); err != nil && !errors.Is(err, storage.ErrExists) {
			return fmt.Errorf("apigateway: create namespace %s: %w", name, err)
		}
	}
	return nil
}
