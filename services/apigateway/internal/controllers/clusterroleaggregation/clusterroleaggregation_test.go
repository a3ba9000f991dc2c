package clusterroleaggregation

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz/bootstrap"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func hasRule(rules []rbacv1.PolicyRule, group, resource string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource)
	})
}

// TestAggregation: view, edit and admin gather the rules of the roles
// their selectors match (edit includes view's, admin edit's), and follow
// a role labelled to aggregate into view as it is created, changed and
// deleted.
func TestAggregation(t *testing.T) {
	api := resourcestest.Start(t)
	admin := identity.WithUser(context.Background(), identity.User{Name: "admin", Groups: []string{"system:masters"}})
	if err := bootstrap.Reconcile(admin, api.Registry, api.Server); err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server, Logger: api.Logger, Retry: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reconciletest.Run(t, c.Run)

	res, _ := api.Registry.Lookup(rbacv1.SchemeGroupVersion.WithResource("clusterroles"))
	rules := func(name string) []rbacv1.PolicyRule {
		obj := storagetest.Object(t, api.Store, api.Codec, res, "", name)
		if obj == nil {
			return nil
		}
		return obj.(*rbacv1.ClusterRole).Rules
	}
	polltest.Until(t, 10*time.Second, "view, edit and admin to aggregate", func() bool {
		return hasRule(rules("view"), "", "configmaps") && hasRule(rules("edit"), "", "configmaps") &&
			hasRule(rules("edit"), "apps", "deployments") && hasRule(rules("admin"), "rbac.authorization.k8s.io", "rolebindings") &&
			hasRule(rules("admin"), "apps", "deployments") && hasRule(rules("admin"), "", "configmaps")
	})
	if hasRule(rules("view"), "", "secrets") || hasRule(rules("edit"), "rbac.authorization.k8s.io", "rolebindings") {
		t.Error("view or edit gathered the rules of a role they do not select")
	}

	widgets := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets-view", Labels: map[string]string{bootstrap.AggregateToView: "true"}},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}},
	}
	if _, err := api.Server.CreateObject(admin, res, widgets); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a labelled role to reach view, edit and admin", func() bool {
		return hasRule(rules("view"), "example.com", "widgets") && hasRule(rules("edit"), "example.com", "widgets") && hasRule(rules("admin"), "example.com", "widgets")
	})
	ref := &apiv1.ResourceRef{Group: rbacv1.GroupName, Version: "v1", Resource: "clusterroles", Name: "widgets-view"}
	if _, err := api.Server.DeleteObject(admin, res, ref, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "a deleted role to leave view, edit and admin", func() bool {
		return !hasRule(rules("view"), "example.com", "widgets") && !hasRule(rules("edit"), "example.com", "widgets") && !hasRule(rules("admin"), "example.com", "widgets")
	})
}

// TestAggregate: selectors are applied in order, the selected roles by
// name, each rule once, the aggregated role itself left out.
func TestAggregate(t *testing.T) {
	rule := func(resource string) rbacv1.PolicyRule {
		return rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{resource}}
	}
	role := func(name string, lbls map[string]string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}, Rules: rules}
	}
	agg := role("agg", map[string]string{"a": "true"})
	agg.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{
		{MatchLabels: map[string]string{"a": "true"}}, {MatchLabels: map[string]string{"b": "true"}},
	}}
	roles := map[string]*rbacv1.ClusterRole{
		"agg": agg,
		"z":   role("z", map[string]string{"a": "true"}, rule("pods")),
		"m":   role("m", map[string]string{"a": "true"}, rule("secrets"), rule("pods")),
		"b":   role("b", map[string]string{"b": "true"}, rule("configmaps")),
		"n":   role("n", nil, rule("nodes")),
	}
	got, err := Aggregate(agg, roles)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got {
		names = append(names, r.Resources[0])
	}
	if strings.Join(names, ",") != "secrets,pods,configmaps" {
		t.Errorf("aggregate: %v", names)
	}
}
