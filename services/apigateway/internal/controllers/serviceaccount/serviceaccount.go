// Package serviceaccount is the gateway's ServiceAccount controller, as
// kube-controller-manager's: every namespace that is not being deleted
// has a ServiceAccount named "default", created with the namespace and
// again whenever it is deleted. Clients, and the Kubernetes e2e
// framework, wait for it before they use a new namespace.
package serviceaccount

import (
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/nsobject"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultName is the name of the ServiceAccount in every namespace.
const DefaultName = "default"

// User is the identity the controller writes as.
var User = reconcile.ServiceAccountUser("service-account-controller")

// New returns the controller; cfg's Spec and User are set here.
func New(cfg nsobject.Config) (*nsobject.Controller, error) {
	cfg.User = User
	cfg.Spec = nsobject.Spec{
		Resource: corev1.SchemeGroupVersion.WithResource("serviceaccounts"),
		Name:     DefaultName,
		New: func(ns string) runtime.Object {
			return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: DefaultName}}
		},
	}
	return nsobject.New(cfg)
}
