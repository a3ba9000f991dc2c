package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestListLargerThanMessageLimit: a collection whose stored values exceed
// gRPC's 64 MiB message limit is still listed whole, as JSON and as
// protobuf (reads fall back to smaller pages at one revision when a reply
// would be too large), and watchfanout, restarted, lists it into its
// cache and becomes ready.
func TestListLargerThanMessageLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 70 MiB")
	}
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e.createNamespace("big")
	const n = 70
	payload := strings.Repeat("x", 1000*1000)
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i)}, Data: map[string]string{"d": payload}}
		if _, err := e.client.CoreV1().ConfigMaps("big").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		list, err := e.clientFor(t, ct).CoreV1().ConfigMaps("big").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: %v", ct, err)
		}
		list.Items = withoutRootCA(t, list.Items)
		if len(list.Items) != n || list.ResourceVersion == "" {
			t.Fatalf("%s: %d items at resourceVersion %q, want %d", ct, len(list.Items), list.ResourceVersion, n)
		}
		for i, cm := range list.Items {
			if cm.Name != fmt.Sprintf("cm-%02d", i) || len(cm.Data["d"]) != len(payload) {
				t.Fatalf("%s: item %d is %s with %d bytes", ct, i, cm.Name, len(cm.Data["d"]))
			}
		}
	}

	// Compacted, the restarted watchfanout cannot replay history up to
	// now: it lists the current state, big objects included.
	e.compact(ctx)
	if err := e.cp.Close(); err != nil {
		t.Fatal(err)
	}
	again := newEnv(t, func(c *allinone.Config) { c.DataDir = e.dataDir })
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		// Without a synced replica the check is degraded (the store
		// serves), not failing: wait for its plain "ok".
		out, err := again.client.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "").Do(ctx).Raw()
		return err == nil && strings.Contains(string(out), "[+]watchfanout ok\n"), nil
	})
	if err != nil {
		t.Fatal("watchfanout did not become ready over a collection larger than the message limit")
	}
}
