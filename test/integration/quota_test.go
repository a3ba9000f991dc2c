package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	store "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// quotaClients starts a store and n gateways over it and returns an admin
// client of each.
func quotaClients(t *testing.T, n int) []kubernetes.Interface {
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	storeAddr := storetest.Start(t, store.Config{ID: "store-0", Logger: quiet}).Addr
	ca := pkitest.NewCA(t, "test-ca")
	serving := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("meridian-apiserver"))
	admin := pkitest.Issue(t, ca, pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	var clients []kubernetes.Interface
	for i := range n {
		gw, err := gateway.New(t.Context(), gateway.Config{
			StoreAddress: storeAddr, GatewayID: fmt.Sprintf("gw-%d", i),
			Registry:   registry.New(registry.Standard()...),
			ServingTLS: pki.ServerTLS(serving, nil, tls.NoClientCert), ClientCAs: ca.Pool(), Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		c, err := kubernetes.NewForConfig(&rest.Config{
			Host:            "https://" + daemontest.Serve(t, gw).Addr,
			TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: admin.CertPEM, KeyData: admin.KeyPEM},
			QPS:             1000, Burst: 1000,
		})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	return clients
}

// TestQuotaHoldsAcrossGateways: a quota leaving room for 3 ConfigMaps
// holds under 20 concurrent creates sent through two gateways: exactly 3
// are stored, the others get kube-apiserver's 403, status.used says how
// many there are, and a delete makes room for one more.
func TestQuotaHoldsAcrossGateways(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	gws := quotaClients(t, 2)
	const ns = "quota"
	if _, err := gws[0].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	existing, err := gws[0].CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base := int64(len(existing.Items))
	hard := base + 3
	if _, err := gws[0].CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "cms"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/configmaps": *resource.NewQuantity(hard, resource.DecimalSI)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	used := func() int64 {
		q, err := gws[1].CoreV1().ResourceQuotas(ns).Get(ctx, "cms", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u, ok := q.Status.Used["count/configmaps"]
		if !ok {
			return -1
		}
		return u.Value()
	}
	polltest.Until(t, 15*time.Second, "the quota's status counted", func() bool { return used() == base })
	// Every gateway follows the quotas before the burst (a gateway that
	// has not seen a quota yet charges nothing, as kube-apiserver's
	// informer-fed quota admission): one created after "cms", allowing no
	// Secret, refuses a Secret on both.
	if _, err := gws[0].CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "no-secrets"},
		Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"secrets": resource.MustParse("0")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 15*time.Second, "both gateways enforce the quotas", func() bool {
		for _, c := range gws {
			_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(err) {
				return false
			}
		}
		return true
	})

	var mu sync.Mutex
	var created int
	var refusals []string
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := gws[i%2].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}}, metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case apierrors.IsForbidden(err):
				refusals = append(refusals, err.Error())
			default:
				t.Errorf("create cm-%d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if created != 3 || len(refusals) != 17 {
		t.Fatalf("%d created, %d refused; want 3 and 17", created, len(refusals))
	}
	want := fmt.Sprintf("exceeded quota: cms, requested: count/configmaps=1, used: count/configmaps=%d, limited: count/configmaps=%d", hard, hard)
	for _, msg := range refusals {
		if !strings.Contains(msg, want) {
			t.Fatalf("refusal %q, want it to say %q", msg, want)
		}
	}
	list, err := gws[0].CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := int64(len(list.Items)); got != hard {
		t.Fatalf("%d ConfigMaps stored, want %d", got, hard)
	}
	if u := used(); u != hard {
		t.Fatalf("status.used %d, want %d", u, hard)
	}

	// A delete gives the room back (the recount after it), and the
	// next create fits.
	var victim string
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "cm-") {
			victim = cm.Name
		}
	}
	if err := gws[1].CoreV1().ConfigMaps(ns).Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 15*time.Second, "the quota's used back down", func() bool { return used() == hard-1 })
	if _, err := gws[0].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}
}
