package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"testing"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	flowcontrol "github.com/meridian-cp/meridian/services/flowcontrol/app"
	store "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// TestTwoGatewaysShareOneLimit: two gateways take seats from one
// flow-control service, which reads its configuration from the store. A
// FlowSchema sends alice to a Reject level of one seat; while a create of
// hers through the first gateway holds it (its body never comes), her
// list through the second gateway is a 429: the budget is the fleet's,
// not each gateway's.
func TestTwoGatewaysShareOneLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)
	storeAddr := storetest.Start(t, store.Config{ID: "store-0", Logger: quiet}).Addr
	fc, err := flowcontrol.New(ctx, flowcontrol.Config{StoreAddress: storeAddr, ConcurrencyLimit: 100, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	fcAddr := daemontest.Serve(t, fc).Addr

	ca := pkitest.NewCA(t, "test-ca")
	serving := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("meridian-apiserver"))
	var addrs [2]string
	for i := range addrs {
		gw, err := gateway.New(ctx, gateway.Config{
			StoreAddress: storeAddr, FlowControlAddress: fcAddr, GatewayID: fmt.Sprintf("gw-%d", i),
			Registry:   registry.New(registry.Standard()...),
			ServingTLS: pki.ServerTLS(serving, nil, tls.NoClientCert), ClientCAs: ca.Pool(), Logger: quiet,
		})
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = daemontest.Serve(t, gw).Addr
	}
	certFor := func(user string, groups ...string) rest.TLSClientConfig {
		kp := pkitest.Issue(t, ca, pki.CertSpec{CommonName: user, Organizations: groups, Client: true})
		return rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: kp.CertPEM, KeyData: kp.KeyPEM}
	}
	adminTLS, aliceTLS := certFor("admin", "system:masters"), certFor("alice", "dev")
	admin, err := kubernetes.NewForConfig(&rest.Config{Host: "https://" + addrs[0], TLSClientConfig: adminTLS})
	if err != nil {
		t.Fatal(err)
	}

	one, zero := int32(1), int32(0)
	pl, err := admin.FlowcontrolV1().PriorityLevelConfigurations().Create(ctx, &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "one-seat"},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: &one, BorrowingLimitPercent: &zero, LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := admin.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: pl.Name}, MatchingPrecedence: 100,
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects:      []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: "alice"}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("default").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// alice's HTTP client, without client-go's retries after a 429.
	aliceHTTP := func() *http.Client {
		c, err := rest.HTTPClientFor(&rest.Config{TLSClientConfig: aliceTLS})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}()
	list := func(addr string) *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/api/v1/namespaces/default/configmaps", nil)
		resp, err := aliceHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	polltest.Until(t, 15*time.Second, "alice classified by her FlowSchema on both gateways", func() bool {
		a, b := list(addrs[0]), list(addrs[1])
		return a.StatusCode == 200 && b.StatusCode == 200 &&
			a.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == string(fs.UID) && b.Header.Get("X-Kubernetes-PF-FlowSchema-UID") == string(fs.UID)
	})

	// Hold the seat through gateway 0.
	holder, err := tls.Dial("tcp", addrs[0], &tls.Config{RootCAs: ca.Pool(), NextProtos: []string{"http/1.1"}, Certificates: []tls.Certificate{clientCert(t, aliceTLS)}})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := fmt.Fprintf(holder, "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a 429 from the other gateway", func() bool {
		resp := list(addrs[1])
		return resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != ""
	})
	if resp := list(addrs[0]); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the holding gateway: %d, want 429", resp.StatusCode)
	}
	holder.Close()
	polltest.Until(t, 10*time.Second, "alice served again once the seat is free", func() bool { return list(addrs[1]).StatusCode == 200 })
}

// clientCert is the tls.Certificate of a client configuration.
func clientCert(t *testing.T, c rest.TLSClientConfig) tls.Certificate {
	t.Helper()
	cert, err := tls.X509KeyPair(c.CertData, c.KeyData)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
