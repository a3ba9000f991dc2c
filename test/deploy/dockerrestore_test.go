package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// restoreOnDocker runs the chart's restore mode (restore.fromSnapshot) on
// the chart's pods on Docker, as docs/deploy.md's "Backup and restore"
// tells a user to: `store snapshot save` from the running release into
// the operator's directory (which plays the backup volume), every pod
// removed and every store member's data directory deleted (new PVCs),
// then the chart rendered again with restore.fromSnapshot naming that
// volume and file (its Secrets kept, as the chart's lookup keeps them)
// and its pods started: each voter's init container "restore" fills its
// empty data directory from the file, the voters bootstrap a new cluster
// together and the non-voter joins it. Through the gateways every
// Namespace, ConfigMap, ServiceAccount and Secret that the backup holds
// must be back with its resourceVersion and content, the store must have
// a leader and its 4 members, and the next write's resourceVersion must
// come after the backup's. Then every voter is replaced at once (its
// init container runs again, --skip-if-present): the write made after
// the restore must survive it.
func restoreOnDocker(t *testing.T, run *podRunner, pods []*pod, version, ops string, cli func(args ...string) (string, error), clients []kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	const file = "meridian.snap"
	// An object is in the backup for sure when it is listed the same
	// before and after the snapshot (the control plane's own controllers
	// may write meanwhile).
	before := listObjects(t, clients[0])
	if out, err := cli("snapshot", "save", "/ops/"+file); err != nil {
		t.Fatalf("store snapshot save: %v: %s", err, out)
	}
	after := listObjects(t, clients[0])
	var want []string
	for o := range before.objects {
		if after.objects[o] {
			want = append(want, o)
		}
	}
	sort.Strings(want)
	workload := 0
	for _, o := range want {
		for _, ns := range workloadNamespaces {
			if strings.HasPrefix(o, "ConfigMap "+ns+"/") {
				workload++
			}
		}
	}
	if workload < 20 {
		t.Fatalf("only %d of the workload's ConfigMaps are certainly in the backup: nothing to check a restore against", workload)
	}
	t.Logf("backup %s: %d objects to find again (%d of them the workload's ConfigMaps), list resourceVersion %s", file, len(want), workload, after.rv)

	// A new release: no pod, no store data directory of the old one.
	began := time.Now()
	run.mu.Lock()
	containers := run.containers
	run.containers = nil
	run.mu.Unlock()
	for _, c := range containers {
		if out, err := exec.Command("docker", "rm", "-f", c).CombinedOutput(); err != nil {
			t.Fatalf("docker rm -f %s: %v: %s", c, err, out)
		}
	}
	for _, p := range pods {
		if !isStorePod(p) {
			continue
		}
		run.mu.Lock()
		old := run.volumes[p.name]
		delete(run.volumes, p.name)
		run.mu.Unlock()
		for _, c := range p.claims {
			if err := os.RemoveAll(old[c]); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, _, next := chartPods(renderTopology(t, version, "restore.fromSnapshot.enabled=true,"+
		"restore.fromSnapshot.volume.persistentVolumeClaim.claimName=meridian-backups,"+
		"restore.fromSnapshot.volume.persistentVolumeClaim.readOnly=true,restore.fromSnapshot.file="+file))
	ips := map[string]string{}
	for _, p := range pods {
		ips[p.name] = p.ip
	}
	var voters []*pod
	for _, p := range next {
		p.ip = ips[p.name]
		if p.ip == "" {
			t.Fatalf("the restore's render has pod %s, which the release did not have", p.name)
		}
		if !restoresFromBackup(p) {
			continue
		}
		voters = append(voters, p)
		// The claim meridian-backups: the directory the backup was saved in.
		volumes := podVolumes(t, p, run.secrets)
		volumes["restore"] = ops
		run.mu.Lock()
		run.volumes[p.name] = volumes
		run.mu.Unlock()
	}
	if len(voters) != 3 {
		t.Fatalf("%d pods restore from the backup, want the 3 voters", len(voters))
	}
	for _, p := range next {
		run.start(p)
	}
	storeLeader(t, cli)
	restored := awaitObjects(t, clients, want)
	t.Logf("restored release serving every object of the backup %s after the old one was removed", time.Since(began).Round(100*time.Millisecond))
	if list, err := cli("member", "list"); err != nil || strings.Count(list, "\n") != 4 {
		t.Errorf("store member list after the restore: %v\n%s", err, list)
	}
	if rvNumber(t, restored.rv) < rvNumber(t, after.rv) {
		t.Errorf("list resourceVersion %s after the restore, before the backup's %s", restored.rv, after.rv)
	}
	cm, err := clients[0].CoreV1().ConfigMaps("demo").Create(ctx, configMap("after-restore"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("first write after the restore: %v", err)
	}
	if rvNumber(t, cm.ResourceVersion) <= rvNumber(t, after.rv) {
		t.Errorf("the first write after the restore got resourceVersion %s, not after the backup's %s", cm.ResourceVersion, after.rv)
	}

	// Every voter restarts at once: each init container finds a store and
	// leaves it, so the write after the restore is kept.
	for _, p := range voters {
		for _, c := range p.spec.Containers {
			if out, err := exec.Command("docker", "rm", "-f", run.containerName(p, c)).CombinedOutput(); err != nil {
				t.Fatalf("docker rm -f: %v: %s", err, out)
			}
		}
	}
	for _, p := range voters {
		run.start(p)
	}
	storeLeader(t, cli)
	awaitObjects(t, clients, append(want, objectLine("ConfigMap", cm.ObjectMeta, cm.Data)))
}

// isStorePod tells whether p is a store member's pod (voter or non-voter).
func isStorePod(p *pod) bool {
	return p.labels["app.kubernetes.io/component"] == "store"
}

// restoresFromBackup tells whether p runs the chart's restore init
// container.
func restoresFromBackup(p *pod) bool {
	for _, c := range p.spec.InitContainers {
		if c.Name == "restore" {
			return true
		}
	}
	return false
}

// objectSet is what listObjects saw: one line per object and the
// resourceVersion of the newest list.
type objectSet struct {
	objects map[string]bool
	rv      string
}

// listObjects lists every Namespace, ConfigMap, ServiceAccount and Secret
// through c as objectLine lines: kinds the control plane does not rewrite
// on its own once they exist (unlike Leases).
func listObjects(t *testing.T, c kubernetes.Interface) objectSet {
	t.Helper()
	s, err := tryListObjects(c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tryListObjects is listObjects returning its error.
func tryListObjects(c kubernetes.Interface) (objectSet, error) {
	ctx := context.Background()
	s := objectSet{objects: map[string]bool{}}
	newest := func(rv string) {
		if len(rv) > len(s.rv) || (len(rv) == len(s.rv) && rv > s.rv) {
			s.rv = rv
		}
	}
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list namespaces: %w", err)
	}
	newest(nss.ResourceVersion)
	for _, o := range nss.Items {
		s.objects[objectLine("Namespace", o.ObjectMeta, o.Status.Phase)] = true
	}
	cms, err := c.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list configmaps: %w", err)
	}
	newest(cms.ResourceVersion)
	for _, o := range cms.Items {
		s.objects[objectLine("ConfigMap", o.ObjectMeta, o.Data)] = true
	}
	sas, err := c.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list serviceaccounts: %w", err)
	}
	newest(sas.ResourceVersion)
	for _, o := range sas.Items {
		s.objects[objectLine("ServiceAccount", o.ObjectMeta, o.Secrets)] = true
	}
	secrets, err := c.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return s, fmt.Errorf("list secrets: %w", err)
	}
	newest(secrets.ResourceVersion)
	for _, o := range secrets.Items {
		s.objects[objectLine("Secret", o.ObjectMeta, o.Data)] = true
	}
	return s, nil
}

// objectLine is "<kind> <namespace>/<name> <uid> <resourceVersion>
// <content>".
func objectLine(kind string, m metav1.ObjectMeta, content any) string {
	return fmt.Sprintf("%s %s/%s %s %s %v", kind, m.Namespace, m.Name, m.UID, m.ResourceVersion, content)
}

// awaitObjects waits (up to two minutes, while the gateways find the
// restarted store) until every gateway lists every object of want, and
// returns the last list of the first gateway; it fails the test with
// what is missing.
func awaitObjects(t *testing.T, clients []kubernetes.Interface, want []string) objectSet {
	t.Helper()
	var first objectSet
	for g, c := range clients {
		var missing []string
		var err error
		deadline := time.Now().Add(2 * time.Minute)
		for {
			var s objectSet
			s, err = tryListObjects(c)
			missing = missing[:0]
			if err == nil {
				for _, o := range want {
					if !s.objects[o] {
						missing = append(missing, o)
					}
				}
				if g == 0 {
					first = s
				}
			}
			if (err == nil && len(missing) == 0) || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if err != nil {
			t.Fatalf("gateway %d: %v", g, err)
		}
		if len(missing) > 0 {
			t.Fatalf("gateway %d lists %d of the %d objects without (or changed from) what was stored:\n%s", g, len(missing), len(want), strings.Join(missing, "\n"))
		}
	}
	return first
}
