package deploy

import (
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// pod is one pod of the rendered chart, as a kubelet would run it.
type pod struct {
	name, ip string
	labels   map[string]string
	spec     *corev1.PodSpec
	// claims are the StatefulSet's volumeClaimTemplates' names.
	claims []string
	// owner is the StatefulSet or Deployment, ordinal the pod's index in
	// it; deployment tells which.
	owner      string
	ordinal    int
	deployment bool
}

// runChartOnDocker renders the chart (3 voters and a non-voter, 2
// watchfanout replicas, one of each other tier) with the images just built, and runs its pods
// on a Docker network the way a kubelet would: the rendered Secrets as
// files where the pods mount them, emptyDirs and PVCs as directories,
// $(POD_NAME) and $(POD_IP) from the downward API, the init containers
// first, every container with a read-only root as the image's user. Pod
// and Service DNS names are /etc/hosts entries (Docker has no cluster
// DNS). Then kubectl, with the admin kubeconfig the chart rendered,
// reaches the gateway, finds every dependency healthy in
// /readyz?verbose, and writes and reads a ConfigMap; and the store CLI,
// with an operator certificate issued from the chart's internal CA as
// docs/deploy.md says, lists the 3 voters and the non-voter that joined
// and saves a snapshot; and a ValidatingAdmissionPolicy denies through
// every gateway (admitInChart). Then the fault test (faults) runs, and
// after it the restore of a backup into a new release (restoreOnDocker).
// With upgradeTo (a second image tag), both give way to upgradeRoll:
// `helm upgrade` to that tag and back, under the workload.
func runChartOnDocker(t *testing.T, version, upgradeTo string) {
	c := playChart(t, renderTopology(t, version))
	if len(c.gateways) != 2 {
		t.Fatalf("the chart runs %d apigateway containers, want 2", len(c.gateways))
	}
	for i := range c.gateways {
		awaitHealthy(t, func(args ...string) (string, error) { return c.kubectlAt(i, args...) })
	}
	kubectl := func(args ...string) (string, error) { return c.kubectlAt(0, args...) }
	for _, args := range [][]string{
		{"create", "namespace", "demo"},
		{"-n", "demo", "create", "configmap", "one", "--from-literal=k=v"},
	} {
		if out, err := kubectl(args...); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	if out, err := kubectl("-n", "demo", "get", "configmap", "one", "-o", "jsonpath={.data.k}"); err != nil || out != "v" {
		t.Errorf("kubectl get configmap one: %v: %q, want v", err, out)
	}
	cli, ops := operate(t, version, c.network, c.addHosts, c.secrets["meridian-internal-ca"], c.hosts)
	awaitMembers(t, cli, map[string]bool{"meridian-store-0": true, "meridian-store-1": true, "meridian-store-2": true, "meridian-store-nv-0": false})
	saveSnapshot(t, cli, ops)
	if *topologyKeep != "" {
		keepTopology(t, c.kubeconfig, []string{c.server(0), c.server(1)})
		return
	}
	var clients, watchClients []kubernetes.Interface
	for i := range c.gateways {
		clients = append(clients, clientFor(t, c.base, c.server(i), 10*time.Second, 0))
		watchClients = append(watchClients, clientFor(t, c.base, c.server(i), 0, 0))
	}
	admitInChart(t, kubectl, clients)
	if n := *tierCPURequests; n > 0 {
		measureTierCPU(t, n, c.network, storeLeader(t, cli), clientFor(t, c.base, c.server(0), 10*time.Second, float32(*tierCPURate)))
	}
	if upgradeTo != "" {
		upgradeRoll(t, c.run, c.pods, version, upgradeTo, cli, clients, watchClients)
		return
	}
	faults(t, c.network, cli, c.kubectlAt, clients, watchClients)
	restoreOnDocker(t, c.run, c.pods, version, ops, cli, clients)
}

// chartOnDocker is a rendered chart's pods running on a Docker network
// (playChart).
type chartOnDocker struct {
	network  string
	run      *podRunner
	pods     []*pod
	secrets  map[string]*corev1.Secret
	hosts    map[string]string // DNS name -> pod address
	addHosts []string          // hosts as docker run --add-host flags
	// gateways are the apigateway containers, gatewayPods their pods,
	// in the order of the manifests.
	gateways    []string
	gatewayPods []*pod
	kubeconfig  string // the admin kubeconfig the chart rendered
	base        *rest.Config
}

// server is gateway i's published API (a refused address while it is
// not running, so that clients retry).
func (c *chartOnDocker) server(i int) string {
	port, err := exec.Command("docker", "port", c.gateways[i], "6443/tcp").Output()
	if err != nil {
		return "https://127.0.0.1:1"
	}
	return "https://" + strings.Split(strings.TrimSpace(string(port)), "\n")[0]
}

// kubectlAt runs kubectl as the admin against gateway i.
func (c *chartOnDocker) kubectlAt(i int, args ...string) (string, error) {
	out, err := exec.Command("kubectl", append([]string{"--kubeconfig", c.kubeconfig, "--server", c.server(i)}, args...)...).CombinedOutput()
	return string(out), err
}

// playChart runs the pods of the rendered manifests objs on a new Docker
// network the way a kubelet would (see runChartOnDocker): pod and
// Service DNS names as /etc/hosts entries, every StatefulSet's pods
// first in the manifests' order. The network and containers are removed
// when t ends (kept with -topology-keep unless t failed).
func playChart(t *testing.T, objs []object) *chartOnDocker {
	const ns = "mrd"
	b := make([]byte, 1)
	rand.Read(b)
	subnet := fmt.Sprintf("172.31.%d", 100+int(b[0])%100)
	b = make([]byte, 3)
	rand.Read(b)
	network := fmt.Sprintf("meridian-chart-test-%x", b)
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := docker("network", "create", "--label", topologyLabel+"="+network, "--subnet", subnet+".0/24", network); err != nil {
		t.Fatalf("docker network create: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if *topologyKeep != "" && !t.Failed() {
			return
		}
		docker("network", "rm", network) // after the containers' cleanup
	})

	// The pods, their addresses and names.
	c := &chartOnDocker{network: network, hosts: map[string]string{}}
	var services []*corev1.Service
	c.secrets, services, c.pods = chartPods(objs)
	for i, p := range c.pods {
		p.ip = fmt.Sprintf("%s.%d", subnet, 10+i)
		for _, s := range services {
			if s.Spec.Selector == nil || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(p.labels)) {
				continue
			}
			if s.Spec.ClusterIP == corev1.ClusterIPNone {
				c.hosts[fmt.Sprintf("%s.%s.%s.svc.cluster.local", p.name, s.Name, ns)] = p.ip
			} else {
				c.hosts[fmt.Sprintf("%s.%s.svc.cluster.local", s.Name, ns)] = p.ip
			}
		}
	}
	for h, ip := range c.hosts {
		c.addHosts = append(c.addHosts, "--add-host", h+":"+ip)
	}

	c.run = &podRunner{t: t, network: network, addHosts: c.addHosts, secrets: c.secrets,
		volumes: map[string]map[string]string{}, hostPorts: map[string]int{}}
	t.Cleanup(func() {
		if *topologyKeep != "" && !t.Failed() {
			return
		}
		for _, name := range c.run.containers {
			if t.Failed() {
				logs, _ := docker("logs", "--tail", "15", name)
				t.Logf("%s:\n%s", name, logs)
			}
			docker("rm", "-f", name)
		}
	})
	for _, p := range c.pods {
		c.run.start(p)
		for _, ct := range p.spec.Containers {
			if ct.Name == "apigateway" {
				c.gateways = append(c.gateways, c.run.containerName(p, ct))
				c.gatewayPods = append(c.gatewayPods, p)
			}
		}
	}
	c.kubeconfig = filepath.Join(scratchDir(t, "kubeconfig"), "admin.kubeconfig")
	ks := c.secrets["meridian-admin-kubeconfig"]
	if ks == nil {
		t.Fatal("no Secret meridian-admin-kubeconfig rendered")
	}
	if err := os.WriteFile(c.kubeconfig, []byte(ks.StringData["kubeconfig"]), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	if c.base, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return c
}

// renderTopology renders the chart as runChartOnDocker runs it, with the
// images of version and any further --set values.
func renderTopology(t *testing.T, version string, set ...string) []object {
	t.Helper()
	values := "image.tag=" + version + ",store.voters=3,watchfanout.autoscaling.enabled=false,watchfanout.replicas=2," +
		"apigateway.autoscaling.enabled=false,apigateway.replicas=2,admission.replicas=1,store.persistence.size=1Gi," +
		"store.nonVoters[0].name=nv,store.nonVoters[0].replicas=1"
	for _, s := range set {
		values += "," + s
	}
	out, err := render(t, "--set", values)
	if err != nil {
		t.Fatal(err)
	}
	return decodeAll(t, out)
}

// chartPods returns the rendered Secrets by name, the Services, and the
// pods the workloads create: StatefulSets' pods by ordinal, then
// Deployments' (named <deployment>-<i>), in the order of the manifests.
func chartPods(objs []object) (map[string]*corev1.Secret, []*corev1.Service, []*pod) {
	secrets := map[string]*corev1.Secret{}
	var services []*corev1.Service
	var pods []*pod
	for _, o := range objs {
		switch w := o.typed.(type) {
		case *corev1.Secret:
			secrets[w.Name] = w
		case *corev1.Service:
			services = append(services, w)
		case *appsv1.StatefulSet:
			var claims []string
			for _, c := range w.Spec.VolumeClaimTemplates {
				claims = append(claims, c.Name)
			}
			for i := range int(*w.Spec.Replicas) {
				pods = append(pods, &pod{name: fmt.Sprintf("%s-%d", w.Name, i), owner: w.Name, ordinal: i, labels: w.Spec.Template.Labels, spec: &w.Spec.Template.Spec, claims: claims})
			}
		case *appsv1.Deployment:
			for i := range int(*w.Spec.Replicas) {
				pods = append(pods, &pod{name: fmt.Sprintf("%s-%d", w.Name, i), owner: w.Name, ordinal: i, deployment: true, labels: w.Spec.Template.Labels, spec: &w.Spec.Template.Spec})
			}
		}
	}
	return secrets, services, pods
}

// podRunner runs the chart's pods on a Docker network as a kubelet
// would (see runChartOnDocker).
type podRunner struct {
	t        *testing.T
	network  string
	addHosts []string
	secrets  map[string]*corev1.Secret
	// volumes are each pod's volume directories, by pod name: kept when
	// the pod is replaced, as its PersistentVolumeClaims are.
	volumes map[string]map[string]string
	// hostPorts are the gateways' published ports, by pod name: a
	// replaced gateway gets its predecessor's, as a Service's address
	// stays.
	hostPorts map[string]int
	// containers are the long-running containers ever started.
	containers []string
	// mu guards volumes, hostPorts and containers: pods of different
	// workloads start at the same time while they roll (upgradeRoll).
	mu sync.Mutex
}

// containerName is the Docker name of p's container c.
func (r *podRunner) containerName(p *pod, c corev1.Container) string {
	return r.network + "-" + p.name + "-" + c.Name
}

// start runs p: its init containers to completion, then its containers
// detached, restarted when they exit with an error.
func (r *podRunner) start(p *pod) {
	r.t.Helper()
	if err := r.startPod(p); err != nil {
		r.t.Fatal(err)
	}
}

// startPod is start, safe to call from other goroutines than the test's
// for a pod started before (its volumes and port exist).
func (r *podRunner) startPod(p *pod) error {
	t := r.t
	r.mu.Lock()
	volumes := r.volumes[p.name]
	if volumes == nil {
		volumes = podVolumes(t, p, r.secrets)
		r.volumes[p.name] = volumes
	}
	r.mu.Unlock()
	env := map[string]string{"POD_NAME": p.name, "POD_IP": p.ip}
	for i, c := range append(append([]corev1.Container{}, p.spec.InitContainers...), p.spec.Containers...) {
		name := r.containerName(p, c)
		args := []string{"run", "--name", name, "--label", topologyLabel + "=" + r.network, "--network", r.network, "--ip", p.ip, "--read-only"}
		args = append(args, r.addHosts...)
		for k, v := range env {
			args = append(args, "-e", k+"="+v)
		}
		for _, m := range c.VolumeMounts {
			mount := filepath.Join(volumes[m.Name], m.SubPath) + ":" + m.MountPath
			if m.ReadOnly {
				mount += ":ro"
			}
			args = append(args, "-v", mount)
		}
		if i < len(p.spec.InitContainers) {
			args = append(args, "--rm")
		} else {
			// As a kubelet restarts a container that exits.
			args = append(args, "-d", "--restart", "on-failure")
			r.mu.Lock()
			r.containers = append(r.containers, name)
			port := r.hostPorts[p.name]
			if c.Name == "apigateway" && port == 0 {
				port = freePort(t)
				r.hostPorts[p.name] = port
			}
			r.mu.Unlock()
			if c.Name == "apigateway" {
				// A fixed host port, as a Service's address, so that
				// clients reach the gateway again after a restart.
				args = append(args, "-p", fmt.Sprintf("127.0.0.1:%d:6443", port))
			}
		}
		args = append(args, c.Image)
		for _, a := range c.Args {
			for k, v := range env {
				a = strings.ReplaceAll(a, "$("+k+")", v)
			}
			args = append(args, a)
		}
		if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("pod %s container %s: %w: %s", p.name, c.Name, err, out)
		}
	}
	return nil
}

// awaitHealthy waits until a gateway's /readyz?verbose shows the store,
// watchfanout, admission and flow control healthy (not degraded).
func awaitHealthy(t *testing.T, kubectl func(args ...string) (string, error)) {
	t.Helper()
	var ready string
	var err error
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready, err = kubectl("get", "--raw", "/readyz?verbose")
		if err == nil && !strings.Contains(ready, "degraded") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the gateway never became ready with every dependency healthy: %v\n%s", err, ready)
		}
		time.Sleep(time.Second)
	}
	for _, check := range []string{"[+]store ok", "[+]watchfanout ok", "[+]admission ok", "[+]flowcontrol ok"} {
		if !strings.Contains(ready, check) {
			t.Errorf("/readyz?verbose has no %q:\n%s", check, ready)
		}
	}
}

// operate issues an operator certificate from the internal CA's Secret
// (meridian pki issue, in the all-in-one image) and returns the store CLI
// (in the store image) on the network, reaching every store member, and
// the operator's directory, mounted at /ops in the CLI's container
// (where it saves backups).
func operate(t *testing.T, version, network string, addHosts []string, ca *corev1.Secret, hosts map[string]string) (cli func(args ...string) (string, error), ops string) {
	t.Helper()
	if ca == nil {
		t.Fatal("no Secret meridian-internal-ca rendered")
	}
	ops = scratchDir(t, "ops")
	for _, d := range []string{ops, filepath.Join(ops, "ca"), filepath.Join(ops, "ca", "internal")} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	for key, file := range map[string]string{"tls.crt": "ca.crt", "tls.key": "ca.key"} {
		if err := os.WriteFile(filepath.Join(ops, "ca", "internal", file), ca.Data[key], 0o444); err != nil {
			t.Fatal(err)
		}
	}
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := docker("run", "--rm", "--read-only", "-v", ops+":/ops", "meridian/meridian:"+version,
		"pki", "issue", "--dir=/ops", "--service=operator"); err != nil {
		t.Fatalf("meridian pki issue --service operator: %v: %s", err, out)
	}
	var endpoints []string
	for h := range hosts {
		if strings.HasPrefix(h, "meridian-store-") && strings.Contains(h, ".meridian-store-peers.") {
			endpoints = append(endpoints, h+":2479")
		}
	}
	cli = func(args ...string) (string, error) {
		run := append([]string{"run", "--rm", "--read-only", "--network", network, "-v", ops + ":/ops"}, addHosts...)
		run = append(run, "meridian/store:"+version)
		run = append(run, args...)
		return docker(append(run, "--endpoints="+strings.Join(endpoints, ","),
			"--cert=/ops/pki/operator.crt", "--key=/ops/pki/operator.key", "--cacert=/ops/pki/internal-ca.crt")...)
	}
	return cli, ops
}

// awaitMembers waits until the store CLI's member list shows exactly the
// members of want (id -> voter), with their suffrage.
func awaitMembers(t *testing.T, cli func(args ...string) (string, error), want map[string]bool) {
	t.Helper()
	var list string
	var err error
	deadline := time.Now().Add(time.Minute)
	for {
		list, err = cli("member", "list")
		if err == nil && strings.Count(list, "\n") == len(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store member list never showed %d members: %v\n%s", len(want), err, list)
		}
		time.Sleep(time.Second)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(list, "\n")[1:] {
		f := strings.Fields(l)
		if len(f) == 5 {
			rows[f[0]] = f[3]
		}
	}
	for id, voter := range want {
		if rows[id] != fmt.Sprint(voter) {
			t.Errorf("member %s: voter %q, want %v:\n%s", id, rows[id], voter, list)
		}
	}
}

// saveSnapshot saves a store snapshot with the CLI into ops/backup.snap
// and checks that the file is not empty.
func saveSnapshot(t *testing.T, cli func(args ...string) (string, error), ops string) {
	t.Helper()
	if out, err := cli("snapshot", "save", "/ops/backup.snap"); err != nil {
		t.Fatalf("store snapshot save: %v: %s", err, out)
	}
	if st, err := os.Stat(filepath.Join(ops, "backup.snap")); err != nil || st.Size() == 0 {
		t.Errorf("snapshot file: %v", err)
	}
}

// podVolumes makes the host directory of each of p's volumes: Secrets'
// files (their items, or every key), empty directories for emptyDirs and
// claims. Files are readable by the image's user, as fsGroup makes them.
func podVolumes(t *testing.T, p *pod, secrets map[string]*corev1.Secret) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	mkdir := func(name string) string {
		d := filepath.Join(scratchDir(t, p.name), name)
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
		return d
	}
	for _, c := range p.claims {
		dirs[c] = mkdir(c)
	}
	for _, v := range p.spec.Volumes {
		d := mkdir(v.Name)
		dirs[v.Name] = d
		if v.Secret == nil {
			continue
		}
		s := secrets[v.Secret.SecretName]
		if s == nil {
			t.Fatalf("pod %s mounts Secret %s, which the chart does not render", p.name, v.Secret.SecretName)
		}
		data := map[string][]byte{}
		for k, b := range s.Data {
			data[k] = b
		}
		for k, str := range s.StringData {
			data[k] = []byte(str)
		}
		items := v.Secret.Items
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				t.Fatalf("pod %s: Secret %s has no key %s", p.name, s.Name, it.Key)
			}
			f := filepath.Join(d, it.Path)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, b, 0o444); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dirs
}

// freePort is a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
