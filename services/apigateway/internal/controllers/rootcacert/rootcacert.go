// Package rootcacert is the gateway's root CA publisher, as
// kube-controller-manager's root-ca-cert-publisher: every namespace that
// is not being deleted has a ConfigMap "kube-root-ca.crt" whose "ca.crt"
// is the CA bundle that verifies the API's serving certificate, so that
// clients in the cluster (a Pod's projected service account volume
// mounts it) can trust the API. The ConfigMap is created with the
// namespace, re-created when deleted, restored when edited, and updated
// in every namespace when the bundle's file changes on disk.
package rootcacert

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/nsobject"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Name, DataKey and the description annotation are kube-controller-
// manager's.
const (
	// Name is the ConfigMap's name in every namespace.
	Name = "kube-root-ca.crt"
	// DataKey is the data key of the bundle.
	DataKey = "ca.crt"
	// DescriptionAnnotation describes the ConfigMap.
	DescriptionAnnotation = "kubernetes.io/description"
	// Description is DescriptionAnnotation's value.
	Description = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// DefaultInterval is how often the bundle's file is read for changes.
const DefaultInterval = 5 * time.Second

// User is the identity the publisher writes as.
var User = reconcile.ServiceAccountUser("root-ca-cert-publisher")

// Publisher keeps kube-root-ca.crt in every namespace; Run runs it.
type Publisher struct {
	ctl      *nsobject.Controller
	file     string
	interval time.Duration
	// bundle is the file's current content (a string: the PEM).
	bundle atomic.Pointer[string]
}

// New returns a Publisher of the PEM bundle in caFile, read now (an
// error when it holds no certificate) and every interval (0:
// DefaultInterval) afterwards. cfg's Spec and User are set here.
func New(cfg nsobject.Config, caFile string, interval time.Duration) (*Publisher, error) {
	p := &Publisher{file: caFile, interval: interval}
	if p.interval == 0 {
		p.interval = DefaultInterval
	}
	b, err := readBundle(caFile)
	if err != nil {
		return nil, err
	}
	p.bundle.Store(&b)
	cfg.User = User
	cfg.Spec = nsobject.Spec{
		Resource: corev1.SchemeGroupVersion.WithResource("configmaps"),
		Name:     Name,
		New: func(ns string) runtime.Object {
			return &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: Name, Annotations: map[string]string{DescriptionAnnotation: Description}},
				Data:       map[string]string{DataKey: *p.bundle.Load()},
			}
		},
		Repair: p.repair,
	}
	if p.ctl, err = nsobject.New(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// repair returns the stored ConfigMap with kube-controller-manager's
// repairs: its data exactly the bundle, and the description annotation
// when it has none (other annotations and labels are the user's).
func (p *Publisher) repair(stored runtime.Object) (runtime.Object, bool) {
	cm := stored.(*corev1.ConfigMap)
	want := map[string]string{DataKey: *p.bundle.Load()}
	if maps.Equal(cm.Data, want) && cm.Annotations[DescriptionAnnotation] != "" {
		return stored, false
	}
	cm = cm.DeepCopy()
	cm.Data = want
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	if cm.Annotations[DescriptionAnnotation] == "" {
		cm.Annotations[DescriptionAnnotation] = Description
	}
	return cm, true
}

// Run publishes until ctx ends, reading the bundle's file every interval
// and updating every namespace's ConfigMap when it changed. A file that
// cannot be read, or holds no certificate, leaves the last bundle
// published.
func (p *Publisher) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); p.ctl.Run(ctx) }()
	defer func() { <-done }()
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := readBundle(p.file)
		if err != nil {
			continue
		}
		if b != *p.bundle.Load() {
			p.bundle.Store(&b)
			p.ctl.Resync()
		}
	}
}

// readBundle reads a PEM CA bundle, which must hold at least one
// certificate.
func readBundle(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("rootcacert: %w", err)
	}
	rest, found := bytes.TrimSpace(data), false
	for len(rest) > 0 {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				return "", fmt.Errorf("rootcacert: %s: %w", file, err)
			}
			found = true
		}
	}
	if !found {
		return "", errors.New("rootcacert: " + file + " holds no PEM certificate")
	}
	return string(data), nil
}
