package deploy

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// chartRegionsFlag makes TestImages also run the chart's two
// multi-region examples on Docker (runRegionsOnDocker).
var chartRegionsFlag = flag.Bool("chart-regions", false, "TestImages: also run the pods of the chart's multi-region examples (layouts a and b) on Docker")

// regionExamples are the chart's multi-region example values files.
var regionExamples = []string{"multi-region-2-2-1.yaml", "voters-one-region-nonvoters.yaml"}

// storeValues is the part of an example's values that says which store
// members it runs.
type storeValues struct {
	Store struct {
		Voters    int `json:"voters"`
		NonVoters []struct {
			Name     string `json:"name"`
			Replicas int    `json:"replicas"`
		} `json:"nonVoters"`
	} `json:"store"`
}

// runRegionsOnDocker renders the chart with a multi-region example's
// values (file, in the chart's examples) and runs its pods on one Docker
// network as runChartOnDocker does. Docker plays the pods and their
// flags, not the distances between regions (TestMultiRegion simulates
// those): every region's gateways become ready with every dependency
// healthy; the store's member list is the example's voters and
// non-voters, each with its suffrage; and writes through the gateways of
// the last region reach a watch through every region's gateways, each
// event once and in order, and every region's resourceVersion=0 list
// (served from the region's own store members, through its own
// watchfanout replicas).
func runRegionsOnDocker(t *testing.T, version, file string) {
	path := filepath.Join(chartDir, "examples", file)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vals struct {
		regionValues
		storeValues
	}
	if err := yaml.Unmarshal(raw, &vals); err != nil {
		t.Fatal(err)
	}
	out, err := render(t, "-f", path, "--set", "image.tag="+version+",store.persistence.size=1Gi")
	if err != nil {
		t.Fatal(err)
	}
	c := playChart(t, decodeAll(t, out))

	// Every region runs gateways of its own (Deployment
	// meridian-apigateway-<region>).
	byRegion := map[string][]int{}
	for i, p := range c.gatewayPods {
		region := strings.TrimPrefix(p.owner, "meridian-apigateway-")
		byRegion[region] = append(byRegion[region], i)
	}
	for _, r := range vals.Regions {
		if len(byRegion[r.Name]) == 0 {
			t.Fatalf("region %s runs no gateway (gateway pods: %v)", r.Name, byRegion)
		}
	}
	if len(byRegion) != len(vals.Regions) {
		t.Fatalf("gateways of %d regions run, the example declares %d: %v", len(byRegion), len(vals.Regions), byRegion)
	}
	for i := range c.gateways {
		awaitHealthy(t, func(args ...string) (string, error) { return c.kubectlAt(i, args...) })
	}

	members := map[string]bool{}
	for i := range vals.Store.Voters {
		members[fmt.Sprintf("meridian-store-%d", i)] = true
	}
	for _, g := range vals.Store.NonVoters {
		for i := range g.Replicas {
			members[fmt.Sprintf("meridian-store-%s-%d", g.Name, i)] = false
		}
	}
	cli, _ := operate(t, version, c.network, c.addHosts, c.secrets["meridian-internal-ca"], c.hosts)
	awaitMembers(t, cli, members)

	const ns, n = "regions", 20
	if out, err := c.kubectlAt(0, "create", "namespace", ns); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := make([]kubernetes.Interface, len(c.gateways))
	for i := range c.gateways {
		clients[i] = clientFor(t, c.base, c.server(i), 10*time.Second, 0)
	}
	// A watch through every gateway, from the namespace's current state.
	list, err := clients[0].CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watchers := make([]watch.Interface, len(c.gateways))
	for i := range c.gateways {
		w, err := clientFor(t, c.base, c.server(i), 0, 0).CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatalf("watch through gateway %s: %v", c.gateways[i], err)
		}
		watchers[i] = w
		defer w.Stop()
	}
	// Writes through the last region's gateways, which for layout (b)
	// are remote from every voter.
	last := byRegion[vals.Regions[len(vals.Regions)-1].Name]
	var names []string
	for k := range n {
		name := fmt.Sprintf("cm-%02d", k)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"k": name}}
		if _, err := clients[last[k%len(last)]].CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s through %s: %v", name, c.gateways[last[k%len(last)]], err)
		}
		names = append(names, name)
	}

	var wg sync.WaitGroup
	for i, w := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var seen []string
			for len(seen) < n {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Errorf("watch through %s ended after %v", c.gateways[i], seen)
						return
					}
					if ev.Type != watch.Added {
						t.Errorf("watch through %s: %s event %v, want ADDED", c.gateways[i], ev.Type, ev.Object)
						return
					}
					seen = append(seen, ev.Object.(*corev1.ConfigMap).Name)
				case <-ctx.Done():
					t.Errorf("watch through %s saw %d of %d events: %v", c.gateways[i], len(seen), n, seen)
					return
				}
			}
			if strings.Join(seen, ",") != strings.Join(names, ",") {
				t.Errorf("watch through %s saw %v, want %v", c.gateways[i], seen, names)
			}
		}()
	}
	wg.Wait()

	// resourceVersion=0 reads are served by each region's own members:
	// every region must hold every write.
	for i := range c.gateways {
		var got int
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			l, err := clients[i].CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err == nil {
				got = len(l.Items)
				if got == n {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Errorf("a resourceVersion=0 list through %s has %d of %d ConfigMaps (%v)", c.gateways[i], got, n, err)
				break
			}
		}
	}
}
