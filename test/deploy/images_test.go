package deploy

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImages builds the six images with hack/images.sh (one command, as
// a user runs it), runs each binary's --help in its image as the non-root
// user with a read-only root, and starts the all-in-one image with a
// read-only root and a volume for its data directory: kubectl reaches its
// HTTPS API with the kubeconfig it wrote, and /version reports the
// version stamped in; then runs the chart's pods on Docker
// (runChartOnDocker), and with -chart-regions the multi-region examples'
// (runRegionsOnDocker). Skipped when no Docker engine answers.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds six images and starts a container: not in -short")
	}
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine answers (docker info: %v: %s): the images cannot be built here", err, strings.TrimSpace(string(out)))
	}
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	b := make([]byte, 4)
	rand.Read(b)
	version := "test-" + hex.EncodeToString(b)

	build := exec.Command("hack/images.sh")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "MERIDIAN_VERSION="+version)
	out, err := build.CombinedOutput()
	names := []string{"store", "watchfanout", "admission", "flowcontrol", "apigateway", "meridian"}
	t.Cleanup(func() {
		if *topologyKeep != "" && !t.Failed() {
			return // hack/topology.sh down removes them
		}
		for _, n := range names {
			exec.Command("docker", "rmi", "-f", "meridian/"+n+":"+version).Run()
		}
	})
	if err != nil {
		t.Fatalf("hack/images.sh: %v\n%s", err, out)
	}
	for _, n := range names {
		if !strings.Contains(string(out), "meridian/"+n+":"+version+"\n") {
			t.Errorf("hack/images.sh did not report meridian/%s:%s:\n%s", n, version, out)
		}
	}

	for _, n := range names {
		image := "meridian/" + n + ":" + version
		t.Run(n, func(t *testing.T) {
			var cfg []struct {
				Config struct {
					User       string
					Entrypoint []string
					Labels     map[string]string
				}
				RootFS struct{ Layers []string }
			}
			raw, err := exec.Command("docker", "image", "inspect", image).Output()
			if err != nil {
				t.Fatalf("docker image inspect %s: %v", image, err)
			}
			if err := json.Unmarshal(raw, &cfg); err != nil || len(cfg) != 1 {
				t.Fatalf("docker image inspect %s: %v", image, err)
			}
			c := cfg[0].Config
			if c.User != "65532:65532" {
				t.Errorf("user %q, want 65532:65532", c.User)
			}
			if want := "/usr/local/bin/" + n; len(c.Entrypoint) != 1 || c.Entrypoint[0] != want {
				t.Errorf("entrypoint %v, want [%s]", c.Entrypoint, want)
			}
			if c.Labels["org.opencontainers.image.version"] != version || c.Labels["io.meridian.binary"] != n {
				t.Errorf("labels %v: want version %s and binary %s", c.Labels, version, n)
			}
			// Non-root, read-only root, no network: --help must still work.
			help, err := exec.Command("docker", "run", "--rm", "--read-only", "--network", "none", image, "--help").CombinedOutput()
			if err != nil {
				t.Errorf("docker run %s --help: %v\n%s", image, err, help)
			}
			if !strings.Contains(string(help), "-listen") {
				t.Errorf("%s --help lists no -listen flag:\n%s", n, help)
			}
		})
	}

	t.Run("all-in-one", func(t *testing.T) {
		runAllInOne(t, "meridian/meridian:"+version, version)
	})
	upgradeTo := ""
	if *upgradeRollFlag {
		// The same sources under a second tag: what `helm upgrade` rolls
		// to, and back from.
		upgradeTo = version + "-up"
		build := exec.Command("hack/images.sh")
		build.Dir = repoRoot
		build.Env = append(os.Environ(), "MERIDIAN_VERSION="+upgradeTo)
		out, err := build.CombinedOutput()
		t.Cleanup(func() {
			for _, n := range names {
				exec.Command("docker", "rmi", "-f", "meridian/"+n+":"+upgradeTo).Run()
			}
		})
		if err != nil {
			t.Fatalf("hack/images.sh (%s): %v\n%s", upgradeTo, err, out)
		}
	}
	t.Run("chart-on-docker", func(t *testing.T) {
		runChartOnDocker(t, version, upgradeTo)
	})
	for _, file := range regionExamples {
		t.Run("regions-on-docker/"+strings.TrimSuffix(file, ".yaml"), func(t *testing.T) {
			if !*chartRegionsFlag {
				t.Skip("runs with -chart-regions (about 25 containers per example)")
			}
			runRegionsOnDocker(t, version, file)
		})
	}
}

// runAllInOne starts the all-in-one image with a read-only root and a
// named volume at its data directory, the API published on a loopback
// port, and checks it with kubectl.
func runAllInOne(t *testing.T, image, version string) {
	name := "meridian-images-test-" + strings.TrimPrefix(version, "test-")
	volume := name + "-data"
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := docker("logs", "--tail", "40", name)
			t.Logf("container logs:\n%s", logs)
		}
		docker("rm", "-f", "-v", name)
		docker("volume", "rm", "-f", volume)
	})
	if out, err := docker("volume", "create", volume); err != nil {
		t.Fatalf("docker volume create: %v: %s", err, out)
	}
	// The named volume starts as the image's /var/lib/meridian, owned by
	// the image's user: the only writable path of the container.
	if out, err := docker("run", "-d", "--name", name, "--read-only",
		"-v", volume+":/var/lib/meridian", "-p", "127.0.0.1::6443",
		image, "--data-dir=/var/lib/meridian", "--listen=0.0.0.0:6443"); err != nil {
		t.Fatalf("docker run: %v: %s", err, out)
	}
	port, err := docker("port", name, "6443/tcp")
	if err != nil {
		t.Fatalf("docker port: %v: %s", err, port)
	}
	port = strings.Split(port, "\n")[0]
	server := "https://" + port

	kubeconfig := filepath.Join(t.TempDir(), "admin.kubeconfig")
	var out string
	deadline := time.Now().Add(90 * time.Second)
	for {
		// The kubeconfig is written once the control plane is ready.
		if _, err = docker("cp", name+":/var/lib/meridian/admin.kubeconfig", kubeconfig); err == nil {
			var b []byte
			b, err = exec.Command("kubectl", "--kubeconfig", kubeconfig, "--server", server, "get", "ns").CombinedOutput()
			out = string(b)
			if err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl get ns through %s never succeeded: %v\n%s", server, err, out)
		}
		time.Sleep(time.Second)
	}
	for _, ns := range []string{"default", "kube-system"} {
		if !strings.Contains(out, ns) {
			t.Errorf("kubectl get ns lists no %s:\n%s", ns, out)
		}
	}
	raw, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "--server", server, "get", "--raw", "/version").Output()
	if err != nil {
		t.Fatalf("kubectl get --raw /version: %v", err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
		GitCommit  string `json:"gitCommit"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("/version: %v: %s", err, raw)
	}
	if !strings.HasPrefix(v.GitCommit, version) {
		t.Errorf("/version gitCommit %q does not carry the stamped version %s", v.GitCommit, version)
	}
	if state, _ := docker("inspect", "-f", "{{.State.Running}} {{.Config.User}} {{.HostConfig.ReadonlyRootfs}}", name); state != "true 65532:65532 true" {
		t.Errorf("container state %q, want running as 65532:65532 with a read-only root", state)
	}
}
