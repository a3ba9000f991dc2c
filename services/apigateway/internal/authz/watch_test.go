package authz

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// storeFixture writes RBAC objects to a real store as the API stores them.
type storeFixture struct {
	t     *testing.T
	store *storage.Store
	codec *codec.Codec
	reg   *registry.Registry
}

func newStoreFixture(t *testing.T) *storeFixture {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	return &storeFixture{t: t, store: storagetest.Start(t), codec: c, reg: registry.New(registry.RBAC()...)}
}

func (f *storeFixture) key(obj runtime.Object) string {
	f.t.Helper()
	gvks, _, err := f.codec.Scheme().ObjectKinds(obj)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, res := range f.reg.Resources(schema.GroupVersion{Group: gvks[0].Group, Version: gvks[0].Version}) {
		if res.Kind == gvks[0].Kind {
			acc, _ := meta.Accessor(obj)
			return res.Key(acc.GetNamespace(), acc.GetName())
		}
	}
	f.t.Fatalf("no resource for %v", gvks[0])
	return ""
}

// put creates or replaces obj and returns the store's revision.
func (f *storeFixture) put(obj runtime.Object) int64 {
	f.t.Helper()
	data, err := f.codec.EncodeStorage(obj)
	if err != nil {
		f.t.Fatal(err)
	}
	key := f.key(obj)
	rev, err := f.store.Create(f.t.Context(), key, data, storage.Parent{}, 0)
	if errors.Is(err, storage.ErrExists) {
		kv, _, gerr := f.store.Get(f.t.Context(), key, storage.ReadOptions{})
		if gerr != nil {
			f.t.Fatal(gerr)
		}
		rev, err = f.store.Update(f.t.Context(), key, data, kv.ModRevision, 0)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return rev
}

func (f *storeFixture) remove(obj runtime.Object) {
	f.t.Helper()
	key := f.key(obj)
	kv, _, err := f.store.Get(f.t.Context(), key, storage.ReadOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.store.Delete(f.t.Context(), key, kv.ModRevision); err != nil {
		f.t.Fatal(err)
	}
}

// TestPolicyFollowsTheStore: the authorizer reads the RBAC objects stored
// before it starts, and every later create, update and delete of a role
// or binding changes its decisions without a read per request; the
// changes apply as soon as the store's watch delivers them (the bound
// below only catches a hang).
func TestPolicyFollowsTheStore(t *testing.T) {
	f := newStoreFixture(t)
	f.put(clusterRole("view", rule(s("get"), s(""), s("configmaps"))))
	r, err := New(Config{Store: f.store, Codec: f.codec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	if err := r.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	getCM := in(resourceRequest("get", "", "configmaps", "", "x"), who("alice", "system:authenticated"), "team")
	allowed := func() bool { ok, _ := r.Allowed(ctx, getCM); return ok }
	if allowed() {
		t.Fatal("allowed before any binding")
	}

	b := roleBinding("team", "alice-views", "ClusterRole", "view", "User:alice")
	f.put(b)
	polltest.Until(t, 10*time.Second, "the binding to apply", allowed)

	f.put(clusterRole("view", rule(s("list"), s(""), s("configmaps"))))
	polltest.Until(t, 10*time.Second, "the role's new rules to apply", func() bool { return !allowed() })

	f.put(role("team", "own", rule(s("get"), s(""), s("configmaps"))))
	f.put(roleBinding("team", "alice-own", "Role", "own", "Group:system:authenticated"))
	polltest.Until(t, 10*time.Second, "a group's binding of a Role to apply", allowed)
	f.remove(role("team", "own"))
	polltest.Until(t, 10*time.Second, "the Role's deletion to apply", func() bool { return !allowed() })

	rev := f.put(clusterRoleBinding("all", "view", "Group:system:authenticated"))
	polltest.Until(t, 10*time.Second, "the policy to reach the binding's revision", func() bool { return r.Revision() >= rev })
	if ok, _ := r.Allowed(ctx, in(resourceRequest("list", "", "configmaps", "", ""), who("bob", "system:authenticated"), "")); !ok {
		t.Error("a ClusterRoleBinding of the policy's revision does not apply")
	}
}

// BenchmarkAllowed: the CPU of one decision with 1,000 RoleBindings (10 in
// each of 100 namespaces) and 100 ClusterRoleBindings, for a user in
// three groups: a request a RoleBinding allows, one a ClusterRoleBinding
// allows, and one nothing allows (every binding naming the user is
// tried).
func BenchmarkAllowed(b *testing.B) {
	var objs []runtime.Object
	objs = append(objs, clusterRole("view", rule(s("get", "list", "watch"), s(""), s("configmaps", "secrets", "pods", "services"))),
		clusterRole("edit", rule(s("create", "update", "patch", "delete"), s("", "apps"), s("configmaps", "deployments"))),
		clusterRole("discovery", urlRule(s("get"), s("/api", "/api/*", "/apis", "/apis/*", "/version"))))
	for i := range 100 {
		objs = append(objs, clusterRoleBinding(fmt.Sprintf("crb-%d", i), "discovery", fmt.Sprintf("Group:team-%d", i), fmt.Sprintf("User:user-%d", i)))
	}
	objs[len(objs)-1] = clusterRoleBinding("crb-99", "discovery", "Group:system:authenticated")
	for ns := range 100 {
		for i := range 10 {
			objs = append(objs, roleBinding(fmt.Sprintf("ns-%d", ns), fmt.Sprintf("rb-%d", i), "ClusterRole", []string{"view", "edit"}[i%2],
				fmt.Sprintf("User:user-%d", ns*10+i), fmt.Sprintf("Group:team-%d", i), fmt.Sprintf("ServiceAccount:sa-%d", i)))
		}
	}
	r := NewStatic(objs...)
	u := who("user-56", "team-7", "dev", "system:authenticated")
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		a    Attributes
		want bool
	}{
		{"role binding", in(resourceRequest("get", "", "configmaps", "", "app"), u, "ns-5"), true},
		{"cluster role binding", in(urlRequest("get", "/apis/apps/v1"), u, ""), true},
		{"denied", in(resourceRequest("delete", "", "namespaces", "", "ns-5"), u, "ns-5"), false},
	} {
		if ok, _ := r.Allowed(ctx, bc.a); ok != bc.want {
			b.Fatalf("%s: allowed %v, want %v", bc.name, ok, bc.want)
		}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Allowed(ctx, bc.a)
			}
		})
	}
	// What the front end pays per request: the attributes from the
	// resolved request, then the decision.
	for _, rc := range []struct{ name, target string }{
		{"REST get", "/api/v1/namespaces/ns-5/configmaps/app"},
		{"REST watch of one name", "/api/v1/namespaces/ns-5/configmaps?watch=1&fieldSelector=metadata.name%3Dapp"},
	} {
		req := httptest.NewRequest(http.MethodGet, rc.target, nil)
		info := requestinfo.New(req.Method, req.URL)
		if ok, _ := r.Allowed(ctx, FromRequest(u, info, req.URL.RawQuery)); !ok {
			b.Fatalf("%s: refused", rc.name)
		}
		b.Run(rc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r.Allowed(ctx, FromRequest(u, info, req.URL.RawQuery))
			}
		})
	}
}
