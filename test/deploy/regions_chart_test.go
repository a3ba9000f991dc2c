package deploy

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// regionValues is the part of the chart's values TestChartRegions reads
// from an example file.
type regionValues struct {
	Regions []struct {
		Name           string   `json:"name"`
		NodeLabelValue string   `json:"nodeLabelValue"`
		StoreGroups    []string `json:"storeGroups"`
		StoreMembers   []string `json:"storeMembers"`
	} `json:"regions"`
}

// TestChartRegions renders the two multi-region examples and checks what
// makes each region's gateways and watchfanout replicas its own: for
// every region, a gateway Deployment, watchfanout StatefulSet, an HPA for
// each and a Service selecting only the region's gateways; both
// workloads required on the region's nodes; their --store-local-address
// exactly the pods of the region's store groups, each of which the chart
// pins to the same region; the gateways' --watchfanout-addresses only the
// region's replicas; no cluster-wide gateway Deployment or watchfanout
// StatefulSet; and the API serving certificate naming each region's
// Service. (TestChart lints these examples, decodes them strictly and
// checks every flag against the binaries.)
func TestChartRegions(t *testing.T) {
	const (
		regionKey = "topology.kubernetes.io/region"
		domain    = ".mrd.svc.cluster.local"
	)
	for _, file := range regionExamples {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join(chartDir, "examples", file)
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var vals regionValues
			if err := yaml.Unmarshal(raw, &vals); err != nil {
				t.Fatal(err)
			}
			if len(vals.Regions) != 3 {
				t.Fatalf("%s declares %d regions, want 3", file, len(vals.Regions))
			}
			out, err := render(t, "-f", path)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeAll(t, out)
			deployments := map[string]*appsv1.Deployment{}
			statefulSets := map[string]*appsv1.StatefulSet{}
			services := map[string]*corev1.Service{}
			hpas := map[string]*autoscalingv2.HorizontalPodAutoscaler{}
			var apiCert *x509.Certificate
			for _, o := range objs {
				switch w := o.typed.(type) {
				case *appsv1.Deployment:
					deployments[w.Name] = w
				case *appsv1.StatefulSet:
					statefulSets[w.Name] = w
				case *corev1.Service:
					services[w.Name] = w
				case *autoscalingv2.HorizontalPodAutoscaler:
					hpas[w.Spec.ScaleTargetRef.Kind+"/"+w.Spec.ScaleTargetRef.Name] = w
				case *corev1.Secret:
					if w.Name == "meridian-apiserver-tls" {
						block, _ := pem.Decode(w.Data["tls.crt"])
						if block == nil {
							t.Fatal("meridian-apiserver-tls holds no PEM certificate")
						}
						if apiCert, err = x509.ParseCertificate(block.Bytes); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if deployments["meridian-apigateway"] != nil || statefulSets["meridian-watchfanout"] != nil {
				t.Error("a cluster-wide gateway Deployment or watchfanout StatefulSet is rendered beside the regions'")
			}
			for _, r := range vals.Regions {
				gw := deployments["meridian-apigateway-"+r.Name]
				wf := statefulSets["meridian-watchfanout-"+r.Name]
				if gw == nil || wf == nil {
					t.Errorf("region %s: gateway Deployment %v, watchfanout StatefulSet %v; want both", r.Name, gw != nil, wf != nil)
					continue
				}
				for _, target := range []string{"Deployment/" + gw.Name, "StatefulSet/" + wf.Name} {
					if hpas[target] == nil {
						t.Errorf("region %s: no HorizontalPodAutoscaler of %s", r.Name, target)
					}
				}
				svc := services["meridian-apigateway-"+r.Name]
				if svc == nil || svc.Spec.Selector["meridian.io/region"] != r.Name || gw.Spec.Template.Labels["meridian.io/region"] != r.Name {
					t.Errorf("region %s: its Service must select its gateways only (Service %v)", r.Name, svc)
				}
				if apiCert != nil && !slices.Contains(apiCert.DNSNames, "meridian-apigateway-"+r.Name+domain) {
					t.Errorf("region %s: the API serving certificate does not name its Service: %v", r.Name, apiCert.DNSNames)
				}
				// The region's store members, from the rendered StatefulSets
				// of its groups, each pinned to the region.
				var want []string
				for _, g := range r.StoreGroups {
					name := "meridian-store-" + g
					if g == "voters" {
						name = "meridian-store"
					}
					sts := statefulSets[name]
					if sts == nil {
						t.Fatalf("region %s: store group %s has no StatefulSet %s", r.Name, g, name)
					}
					if got := sts.Spec.Template.Spec.NodeSelector[regionKey]; got != r.NodeLabelValue {
						t.Errorf("region %s: store StatefulSet %s runs on %s=%q, not in the region", r.Name, name, regionKey, got)
					}
					for i := range int(*sts.Spec.Replicas) {
						want = append(want, fmt.Sprintf("%s-%d.meridian-store-peers%s:2479", name, i, domain))
					}
				}
				for _, m := range r.StoreMembers {
					want = append(want, m+".meridian-store-peers"+domain+":2479")
				}
				for _, spec := range []*corev1.PodSpec{&gw.Spec.Template.Spec, &wf.Spec.Template.Spec} {
					c := spec.Containers[0]
					if !requiresRegion(spec, regionKey, r.NodeLabelValue) {
						t.Errorf("region %s: %s is not required on nodes with %s=%s: %+v", r.Name, c.Name, regionKey, r.NodeLabelValue, spec.Affinity)
					}
					local := strings.Split(flagValue(c.Args, "--store-local-address"), ",")
					if !slices.Equal(local, want) {
						t.Errorf("region %s: %s --store-local-address=%v, want %v", r.Name, c.Name, local, want)
					}
				}
				wfAddrs := strings.Split(flagValue(gw.Spec.Template.Spec.Containers[0].Args, "--watchfanout-addresses"), ",")
				for _, a := range wfAddrs {
					if !strings.HasPrefix(a, "meridian-watchfanout-"+r.Name+"-") {
						t.Errorf("region %s: its gateways list watchfanout replica %s of another StatefulSet", r.Name, a)
					}
				}
				if max := hpas["StatefulSet/"+wf.Name].Spec.MaxReplicas; len(wfAddrs) != int(max) {
					t.Errorf("region %s: its gateways list %d watchfanout replicas, want maxReplicas %d", r.Name, len(wfAddrs), max)
				}
			}
		})
	}
}

// requiresRegion tells whether spec's required node affinity holds only
// nodes whose label key is value.
func requiresRegion(spec *corev1.PodSpec, key, value string) bool {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, term := range terms {
		ok := false
		for _, e := range term.MatchExpressions {
			if e.Key == key && e.Operator == corev1.NodeSelectorOpIn && slices.Equal(e.Values, []string{value}) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// flagValue is the value of --name=value in args, or "".
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}
