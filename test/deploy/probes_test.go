package deploy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// servedPath is a probe's path on the listener one flag of a binary
// configures.
type servedPath struct{ image, flag, path string }

// probePaths collects, over every rendered chart, the paths the probes
// ask each binary for.
type probePaths map[servedPath]bool

// checkProbes checks a serving container's probes: liveness and
// readiness exist, every probe is an httpGet on a port the container
// declares, liveness and startup ask /livez (a restart helps only the
// process itself: a store member without a quorum must not be killed)
// and readiness /readyz; the port is the one a listen flag of the
// container's args binds, and the path is recorded, with that flag, for
// checkServed.
func checkProbes(t *testing.T, where, image string, c corev1.Container, paths probePaths) {
	t.Helper()
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Errorf("%s: liveness probe %v, readiness probe %v: want both", where, c.LivenessProbe != nil, c.ReadinessProbe != nil)
	}
	for _, p := range []struct {
		kind, path string
		probe      *corev1.Probe
	}{{"startup", "/livez", c.StartupProbe}, {"liveness", "/livez", c.LivenessProbe}, {"readiness", "/readyz", c.ReadinessProbe}} {
		if p.probe == nil {
			continue
		}
		get := p.probe.HTTPGet
		if get == nil {
			t.Errorf("%s: %s probe is not an httpGet (%+v)", where, p.kind, p.probe.ProbeHandler)
			continue
		}
		if get.Path != p.path {
			t.Errorf("%s: %s probe asks %s, want %s", where, p.kind, get.Path, p.path)
		}
		i := slices.IndexFunc(c.Ports, func(cp corev1.ContainerPort) bool {
			return (get.Port.StrVal != "" && cp.Name == get.Port.StrVal) || (get.Port.StrVal == "" && cp.ContainerPort == get.Port.IntVal)
		})
		if i < 0 {
			t.Errorf("%s: %s probe's port %s is none the container declares", where, p.kind, get.Port.String())
			continue
		}
		port := ":" + strconv.Itoa(int(c.Ports[i].ContainerPort))
		j := slices.IndexFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--") && strings.HasSuffix(a, port) })
		if j < 0 {
			t.Errorf("%s: %s probe's port %s: no argument makes the binary listen there (%v)", where, p.kind, port, c.Args)
			continue
		}
		flag, _, _ := strings.Cut(strings.TrimPrefix(c.Args[j], "--"), "=")
		paths[servedPath{image, flag, get.Path}] = true
	}
}

// probeRuns are the arguments that start each binary alone on loopback,
// plaintext, besides its listen flags: enough to show what it serves.
// The gateway is not run (it needs the whole system): its /livez and
// /readyz on --listen are tested in services/apigateway.
var probeRuns = map[string]func(t *testing.T) []string{
	"store":       func(t *testing.T) []string { return []string{"--data-dir=" + t.TempDir(), "--log-level=error"} },
	"watchfanout": func(*testing.T) []string { return []string{"--store-address=127.0.0.1:1", "--log-level=error"} },
	"admission":   func(*testing.T) []string { return []string{"--log-level=error"} },
	"flowcontrol": func(*testing.T) []string { return []string{"--log-level=error"} },
}

// listenFlags are the flags of those binaries that bind a port.
var listenFlags = []string{"listen", "metrics-listen"}

// checkServed runs each binary the probes ask (but the gateway) with its
// listen flags on free loopback ports and asks each recorded path where
// the probe's flag listens: /livez must answer 200 "ok", /readyz in
// kube-apiserver's format, 200 "ok" or 500 naming the failed check (a
// watchfanout without a store is not ready), never 404.
func checkServed(t *testing.T, bin string, paths probePaths) {
	if len(paths) == 0 {
		return // no chart was rendered: helm could not be built (skipped)
	}
	byImage := map[string][]servedPath{}
	for p := range paths {
		if p.image != "apigateway" {
			byImage[p.image] = append(byImage[p.image], p)
		}
	}
	for _, image := range []string{"store", "watchfanout", "admission", "flowcontrol"} {
		if len(byImage[image]) == 0 {
			t.Errorf("no probe of the %s container recorded", image)
		}
	}
	for image, ps := range byImage {
		t.Run("served/"+image, func(t *testing.T) {
			extra, ok := probeRuns[image]
			if !ok {
				t.Fatalf("no way to run %s alone", image)
			}
			addrs := map[string]string{}
			args := extra(t)
			for _, f := range listenFlags {
				addrs[f] = freeAddr(t)
				args = append(args, "--"+f+"="+addrs[f])
			}
			cmd := exec.Command(bin+"/"+image, args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			defer func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(20 * time.Second):
					_ = cmd.Process.Kill()
					<-exited
				}
			}()
			for _, p := range ps {
				addr, ok := addrs[p.flag]
				if !ok {
					t.Errorf("%s's probe %s is on --%s, which this test does not set", image, p.path, p.flag)
					continue
				}
				code, body, err := getWhenListening(addr, p.path, exited)
				if err != nil {
					t.Fatalf("%s %v: GET %s: %v\n%s", image, args, p.path, err, stderr.String())
				}
				label := strings.TrimPrefix(p.path, "/")
				switch {
				case code == http.StatusOK && body == "ok":
				case p.path != "/livez" && code == http.StatusInternalServerError && strings.HasSuffix(body, "[-]grpc-health failed: reason withheld\n"+label+" check failed\n"):
				default:
					t.Errorf("%s: GET %s on --%s: %d %q, want 200 ok or a failed kube-style check", image, p.path, p.flag, code, body)
				}
			}
		})
	}
}

// freeAddr returns a loopback address free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// getWhenListening GETs path at addr once something listens there,
// waiting up to 60s; it gives up when the process exits first.
func getWhenListening(addr, path string, exited <-chan error) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := &http.Client{Timeout: 5 * time.Second}
	for {
		resp, err := client.Get("http://" + addr + path)
		if err == nil {
			body, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode, string(body), rerr
		}
		select {
		case err := <-exited:
			return 0, "", fmt.Errorf("the binary exited: %v", err)
		case <-ctx.Done():
			return 0, "", fmt.Errorf("nothing answered at %s: %w", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
