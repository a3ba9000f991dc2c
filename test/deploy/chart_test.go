package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// chartCase is one way to install the chart.
type chartCase struct {
	name string
	// values are helm's value arguments (-f, --set), also given to lint.
	values []string
	// apiVersions are the cluster's extra API versions (--api-versions).
	apiVersions []string
}

func chartCases(t *testing.T) []chartCase {
	cases := []chartCase{
		{name: "default"},
		{name: "cert-manager", values: []string{"--set", "certManager.enabled=true"}},
		{name: "prometheus-operator", apiVersions: []string{"monitoring.coreos.com/v1"}},
		{name: "nodeport-single-voter", values: []string{"--set", "apigateway.service.type=NodePort,apigateway.service.nodePort=30443,store.voters=1,watchfanout.autoscaling.enabled=false,apigateway.autoscaling.enabled=false"}},
	}
	examples, err := filepath.Glob(filepath.Join(chartDir, "examples", "*.yaml"))
	if err != nil || len(examples) < 4 {
		t.Fatalf("examples: %v (%d files; want at least 4)", err, len(examples))
	}
	for _, f := range examples {
		cases = append(cases, chartCase{name: "examples/" + filepath.Base(f), values: []string{"-f", f}})
	}
	return cases
}

// TestChart lints and renders the chart for the default values, each
// example values file and a few settings, decodes every manifest strictly
// into the k8s.io/api types (the CRDs' kinds into their schemas), and
// checks every container against the binary its image holds: each flag
// is one the binary's --help lists, with a value when it takes one.
func TestChart(t *testing.T) {
	bin := buildBinaries(t)
	flags := &flagSets{bin: bin, sets: map[string]map[string]bool{}}
	paths := probePaths{}
	for _, c := range chartCases(t) {
		t.Run(c.name, func(t *testing.T) {
			lint, err := run(helm(t), append([]string{"lint", "--strict", chartDir}, c.values...)...)
			if err != nil {
				t.Fatalf("helm lint: %v\n%s", err, lint)
			}
			args := slices.Clone(c.values)
			for _, v := range c.apiVersions {
				args = append(args, "--api-versions", v)
			}
			out, err := render(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeAll(t, out)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.kind]++
			}
			for _, k := range []string{"StatefulSet", "Deployment", "Service", "Secret", "PodDisruptionBudget", "NetworkPolicy"} {
				if kinds[k] == 0 {
					t.Errorf("no %s rendered (%v)", k, kinds)
				}
			}
			if want := len(c.apiVersions); (kinds["ServiceMonitor"] > 0) != (want > 0) {
				t.Errorf("%d ServiceMonitors rendered with --api-versions %v: want them exactly when monitoring.coreos.com/v1 is served", kinds["ServiceMonitor"], c.apiVersions)
			}
			if c.name == "cert-manager" && kinds["Certificate"] != 8 {
				t.Errorf("%d cert-manager Certificates, want 8 (2 CAs and 6 identities)", kinds["Certificate"])
			}
			specs := podSpecs(objs)
			if len(specs) < 5 {
				t.Fatalf("%d workloads rendered, want at least 5", len(specs))
			}
			for name, spec := range specs {
				checkPod(t, name, spec, flags, paths)
			}
			checkStore(t, objs)
		})
	}
	checkServed(t, bin, paths)
}

// run runs a command and returns its combined output.
func run(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}

// checkPod checks one pod template: non-root with a read-only root, each
// container's image one of meridian's, and its args flags of that binary;
// each file a flag names lies under one of the container's mounts; each
// serving container's probes (checkProbes, recorded in paths).
func checkPod(t *testing.T, name string, spec *corev1.PodSpec, flags *flagSets, paths probePaths) {
	t.Helper()
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: pod does not set runAsNonRoot", name)
	}
	volumes := map[string]bool{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = true
	}
	for i, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		where := name + " container " + c.Name
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: root filesystem not read-only", where)
		}
		if c.Resources.Requests.Memory().IsZero() {
			t.Errorf("%s: no memory request", where)
		}
		image := strings.SplitN(c.Image[strings.LastIndex(c.Image, "/")+1:], ":", 2)[0]
		if _, ok := binaries[image]; !ok {
			t.Errorf("%s: image %s is not one of meridian's", where, c.Image)
			continue
		}
		if len(c.Command) > 0 {
			t.Errorf("%s: overrides the image's entrypoint (%v)", where, c.Command)
		}
		if i >= len(spec.InitContainers) {
			checkProbes(t, where, image, c, paths)
		}
		var mounts []string
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				t.Errorf("%s: mounts %s, which the pod does not have", where, m.Name)
			}
			mounts = append(mounts, m.MountPath+"/")
		}
		words := []string{image}
		args := c.Args
		for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			words, args = append(words, args[0]), args[1:]
		}
		known := flags.of(t, words)
		for _, a := range args {
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !strings.HasPrefix(a, "--") {
				t.Errorf("%s: argument %q is not a --flag", where, a)
				continue
			}
			takesValue, ok := known[name]
			switch {
			case !ok:
				t.Errorf("%s: %s does not accept --%s (its --help lists %v)", where, strings.Join(words, " "), name, keys(known))
			case takesValue && !hasValue:
				t.Errorf("%s: --%s needs a value (--%s=...)", where, name, name)
			case strings.HasSuffix(name, "-file") && !slices.ContainsFunc(mounts, func(m string) bool { return strings.HasPrefix(value, m) }):
				t.Errorf("%s: --%s=%s is under none of the container's mounts %v", where, name, value, mounts)
			}
		}
	}
}

func keys(m map[string]bool) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

// checkStore checks the store's StatefulSets: the voters' bootstrap
// names every voter by the name it advertises, and non-voters join.
func checkStore(t *testing.T, objs []object) {
	t.Helper()
	var voters *appsv1.StatefulSet
	var nonVoters []*appsv1.StatefulSet
	for _, o := range objs {
		s, ok := o.typed.(*appsv1.StatefulSet)
		if !ok || s.Spec.Template.Labels["app.kubernetes.io/component"] != "store" {
			continue
		}
		if s.Spec.Template.Labels["meridian.io/store-role"] == "voter" {
			voters = s
		} else {
			nonVoters = append(nonVoters, s)
		}
	}
	if voters == nil {
		t.Fatal("no store voters StatefulSet")
	}
	n := int(*voters.Spec.Replicas)
	arg := func(s *appsv1.StatefulSet, flag string) (string, bool) {
		for _, a := range s.Spec.Template.Spec.Containers[0].Args {
			if a == "--"+flag {
				return "", true
			}
			if v, ok := strings.CutPrefix(a, "--"+flag+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	ic, _ := arg(voters, "initial-cluster")
	members := strings.Split(ic, ",")
	if len(members) != n {
		t.Errorf("--initial-cluster names %d voters, the StatefulSet runs %d: %s", len(members), n, ic)
	}
	adv, _ := arg(voters, "peer-advertise")
	for i, m := range members {
		id, addrs, _ := strings.Cut(m, "=")
		pod := voters.Name + "-" + string(rune('0'+i))
		if id != pod {
			t.Errorf("voter %d has id %s, want the pod's name %s (--id=$(POD_NAME))", i, id, pod)
		}
		peer, _, _ := strings.Cut(addrs, "/")
		if want := strings.ReplaceAll(adv, "$(POD_NAME)", pod); peer != want {
			t.Errorf("--initial-cluster gives %s peer address %s, but it advertises %s", id, peer, want)
		}
	}
	if pdb := findPDB(objs, "store"); pdb == nil {
		t.Error("no PodDisruptionBudget for the store")
	} else if got, quorum := pdb.Spec.MaxUnavailable.IntValue(), n/2+1; n > 1 && n-got < quorum {
		t.Errorf("store PDB allows %d of %d voters down: below a quorum of %d", got, n, quorum)
	}
	for _, s := range nonVoters {
		if _, ok := arg(s, "non-voter"); !ok {
			t.Errorf("%s: no --non-voter", s.Name)
		}
		if j, _ := arg(s, "join"); len(strings.Split(j, ",")) != n {
			t.Errorf("%s: --join=%s does not name the %d voters", s.Name, j, n)
		}
		if _, ok := arg(s, "initial-cluster"); ok {
			t.Errorf("%s: a non-voter must not bootstrap (--initial-cluster)", s.Name)
		}
	}
}

// TestChartRejectsBadValues: values the schema refuses fail `helm
// template` with the schema's message, and nothing is rendered.
func TestChartRejectsBadValues(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("store:\n  voters: 3\n  replicas: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "store.voters=4"}, "at '/store/voters': value must be one of 1, 3, 5"},
		{[]string{"--set", "store.voters=0"}, "at '/store/voters': value must be one of 1, 3, 5"},
		{[]string{"-f", bad}, "at '/store': additional properties 'replicas' not allowed"},
		{[]string{"--set", "colour=blue"}, "additional properties 'colour' not allowed"},
		{[]string{"--set", "flowcontrol.replicas=10"}, "at '/flowcontrol/replicas': maximum: got 10, want 9"},
		{[]string{"--set", "apigateway.service.type=Ingress"}, "at '/apigateway/service/type': value must be one of 'ClusterIP', 'LoadBalancer', 'NodePort'"},
		{[]string{"--set", "store.nonVoters[0].name=EU,store.nonVoters[0].replicas=1"}, "at '/store/nonVoters/0/name'"},
		{[]string{"--set", "store.compactionRetention=five"}, "at '/store/compactionRetention'"},
		{[]string{"--set", "regions[0].name=eu"}, "at '/regions/0': missing property 'nodeLabelValue'"},
		{[]string{"--set", "regions[0].name=EU,regions[0].nodeLabelValue=eu-west-1"}, "at '/regions/0/name'"},
		{[]string{"--set", "regions[0].name=eu,regions[0].nodeLabelValue=eu-west-1,regions[0].storeGroups[0]=mars"}, `region "eu" names store group "mars", which is neither "voters" nor a store.nonVoters name`},
		{[]string{"--set", "restore.fromSnapshot.enabled=true"}, "at '/restore/fromSnapshot/volume': minProperties: got 0, want 1"},
		{[]string{"--set", "restore.fromSnapshot.enabled=true,restore.fromSnapshot.volume.secret.secretName=s,restore.fromSnapshot.file=../etc/passwd"}, "at '/restore/fromSnapshot/file'"},
		{[]string{"--set", "restore.fromSnapshot.enabled=true,restore.fromSnapshot.volume.name=x"}, "at '/restore/fromSnapshot/volume': 'not' failed"},
		{[]string{"--set", "restore.fromSnapshot.enabled=true,restore.fromSnapshot.volume.secret.secretName=s,restore.fromSnapshot.volume.emptyDir.medium=Memory"}, "at '/restore/fromSnapshot/volume': maxProperties: got 2, want 1"},
	} {
		out, err := render(t, c.args...)
		if err == nil {
			t.Errorf("helm template %v succeeded, want the schema's error %q", c.args, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("helm template %v: %v\nwant the message %q", c.args, err, c.want)
		}
		if len(out) > 0 {
			t.Errorf("helm template %v rendered %d bytes despite the error", c.args, len(out))
		}
	}
}
