package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestBackupRestoreIntoFreshCluster backs a three-voter cluster up with
// `store snapshot save` while a gateway serves it, removes every process
// and data directory, restores the file into three new data directories
// with `store snapshot restore`, starts the voters on them with one
// --initial-cluster and a new gateway, and checks through the
// Kubernetes API what a user relies on: every object with its
// resourceVersion, the next write's resourceVersion after all of them,
// and a watch from a resourceVersion taken before the backup replaying
// what followed it. The processes run in a network namespace (as
// TestMultiRegion's, one region, no delay): needs root, not in -short.
func TestBackupRestoreIntoFreshCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two clusters of processes: not in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns")
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		t.Skipf("ip netns is not usable here: %v: %s", err, out)
	}
	members := []simMember{{"s0", 0, true}, {"s1", 0, true}, {"s2", 0, true}}
	s := newRegionSim(t, 1, members)
	s.startStore()
	ctx := context.Background()
	// up waits for a leader, then starts the watchfanout replica and the
	// gateway and waits until the gateway is ready.
	up := func() {
		t.Helper()
		storeLeader(t, s.cli(0))
		awaitReady(t, s.client(s.startRegion(0, 7004, 6443, true), 10*time.Second))
	}
	up()
	c := s.client("https://"+s.regionAddr(0)+":6443", 10*time.Second)
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cms := c.CoreV1().ConfigMaps("kept")
	var from string
	for i := range 20 {
		cm, err := cms.Create(ctx, configMap(fmt.Sprintf("cm-%02d", i)), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i == 9 {
			from = cm.ResourceVersion
		}
		if i%4 == 0 {
			cm.Data["v"] = "updated"
			if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cms.Delete(ctx, "cm-05", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(s.dir, "backup.snap")
	if out, err := s.cli(0)("snapshot", "save", backup); err != nil {
		t.Fatalf("store snapshot save: %v: %s", err, out)
	}

	// A fresh cluster: no process, no data directory of the old one.
	s.stopAll()
	for _, m := range members {
		dir := filepath.Join(s.dir, m.id)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(filepath.Join(s.bin, "store"), "snapshot", "restore", backup, "--data-dir", dir).CombinedOutput()
		if err != nil {
			t.Fatalf("store snapshot restore into %s: %v: %s", dir, err, out)
		}
	}
	s.startStore()
	up()

	after, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := listed(after), listed(before); got != want {
		t.Errorf("after the restore the namespace lists\n%s\nwant\n%s", got, want)
	}
	// The revision goes on from the backup's: never back. It may have
	// moved past the list before the backup, as the gateways' own
	// controllers write in the background (bootstrap objects, a new
	// namespace's ServiceAccount), before the snapshot or after the
	// restore; the objects above kept their resourceVersions.
	if rvNumber(t, after.ResourceVersion) < rvNumber(t, before.ResourceVersion) {
		t.Errorf("list resourceVersion %s after the restore, before the backup's %s", after.ResourceVersion, before.ResourceVersion)
	}
	next, err := cms.Create(ctx, configMap("after-restore"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rvNumber(t, next.ResourceVersion) <= rvNumber(t, before.ResourceVersion) {
		t.Errorf("the first write after the restore got resourceVersion %s, not after the backup's %s", next.ResourceVersion, before.ResourceVersion)
	}
	// The restored history: a watch from before the backup replays what
	// followed, in order, then the new write.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := cms.Watch(wctx, metav1.ListOptions{ResourceVersion: from})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var seen []string
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch from %s after the restore: %v", from, ev.Object)
		}
		cm := ev.Object.(*corev1.ConfigMap)
		seen = append(seen, fmt.Sprintf("%s %s %s", ev.Type, cm.Name, cm.ResourceVersion))
		if cm.Name == "after-restore" {
			break
		}
	}
	if len(seen) < 12 || !strings.HasPrefix(seen[0], "ADDED cm-10 ") || !strings.HasPrefix(seen[len(seen)-1], "ADDED after-restore "+next.ResourceVersion) {
		t.Errorf("watch from %s after the restore saw:\n%s", from, strings.Join(seen, "\n"))
	}
	for i := 1; i < len(seen); i++ {
		prev, cur := strings.Fields(seen[i-1]), strings.Fields(seen[i])
		if rvNumber(t, cur[2]) <= rvNumber(t, prev[2]) {
			t.Errorf("watch events out of order: %q after %q", seen[i], seen[i-1])
		}
	}
}

// listed is a list's items as "name resourceVersion data" lines.
func listed(l *corev1.ConfigMapList) string {
	var lines []string
	for _, cm := range l.Items {
		lines = append(lines, fmt.Sprintf("%s %s %v", cm.Name, cm.ResourceVersion, cm.Data))
	}
	return strings.Join(lines, "\n")
}
