package quota_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/quota"
)

func TestNames(t *testing.T) {
	for _, c := range []struct {
		gr   schema.GroupResource
		want []corev1.ResourceName
	}{
		{schema.GroupResource{Resource: "configmaps"}, []corev1.ResourceName{"count/configmaps", "configmaps"}},
		{schema.GroupResource{Resource: "serviceaccounts"}, []corev1.ResourceName{"count/serviceaccounts"}},
		{schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, []corev1.ResourceName{"count/leases.coordination.k8s.io"}},
	} {
		got := quota.Names(c.gr)
		if len(got) != len(c.want) {
			t.Errorf("%v: got %v, want %v", c.gr, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%v: got %v, want %v", c.gr, got, c.want)
			}
		}
		for _, n := range got {
			if gr, ok := quota.Counted(n); !ok || gr != c.gr {
				t.Errorf("Counted(%s) = %v, %v; want %v", n, gr, ok, c.gr)
			}
		}
	}
	if _, ok := quota.Counted("requests.cpu"); ok {
		t.Error("requests.cpu is not an object count")
	}
}

func q(hard, used map[corev1.ResourceName]int64) *corev1.ResourceQuota {
	out := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}}}
	for n, v := range hard {
		out.Spec.Hard[n] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	if used != nil {
		out.Status.Used = corev1.ResourceList{}
		for n, v := range used {
			out.Status.Used[n] = *resource.NewQuantity(v, resource.DecimalSI)
		}
	}
	return out
}

func TestCharge(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	names := quota.Names(cm)

	rq := q(map[corev1.ResourceName]int64{"count/configmaps": 3, "cpu": 2}, map[corev1.ResourceName]int64{"count/configmaps": 2})
	changed, err := quota.Charge(rq, names, cm, "a")
	if err != nil || !changed {
		t.Fatalf("charge below hard: %v, %v", changed, err)
	}
	if u := rq.Status.Used["count/configmaps"]; u.Value() != 3 {
		t.Fatalf("used %s, want 3", u.String())
	}
	_, err = quota.Charge(rq, names, cm, "b")
	const want = `configmaps "b" is forbidden: exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3`
	if !apierrors.IsForbidden(err) || err.Error() != want {
		t.Fatalf("got %v, want 403 %q", err, want)
	}
	if u := rq.Status.Used["count/configmaps"]; u.Value() != 3 {
		t.Fatalf("a refused charge changed used to %s", u.String())
	}

	// A quota that limits nothing of the resource is not charged.
	other := q(map[corev1.ResourceName]int64{"count/secrets": 1}, nil)
	if changed, err := quota.Charge(other, names, cm, "c"); changed || err != nil {
		t.Fatalf("unrelated quota: %v, %v", changed, err)
	}
	// Before its status is known, a quota refuses.
	fresh := q(map[corev1.ResourceName]int64{"configmaps": 1}, nil)
	if _, err := quota.Charge(fresh, names, cm, "d"); !apierrors.IsForbidden(err) {
		t.Fatalf("unknown status: got %v, want 403", err)
	}
}

func TestStatus(t *testing.T) {
	rq := q(map[corev1.ResourceName]int64{"count/configmaps": 3, "secrets": 1, "cpu": 2}, nil)
	st, err := quota.Status(rq, func(gr schema.GroupResource) (int64, error) {
		if gr.Resource == "configmaps" {
			return 2, nil
		}
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if u := st.Used["count/configmaps"]; u.Value() != 2 {
		t.Errorf("configmaps used %s", u.String())
	}
	if u, ok := st.Used["secrets"]; !ok || u.Value() != 0 {
		t.Errorf("secrets used %s, %v", u.String(), ok)
	}
	if _, ok := st.Used["cpu"]; ok {
		t.Error("cpu is not counted")
	}
	if len(st.Hard) != 3 {
		t.Errorf("hard %v", st.Hard)
	}
}
