package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoClientsetLinked: no binary links client-go's clientset, informers
// or apply configurations, nor the k8s.io/apiserver packages that import
// them. Their package initialisation registers every group, alpha and
// beta version in client-go's scheme: about 17 MB of binary, whose pages
// the all-in-one keeps resident from its start.
func TestNoClientsetLinked(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the binaries' packages")
	}
	binaries := []string{
		"github.com/meridian-cp/meridian/cmd/meridian",
		"github.com/meridian-cp/meridian/services/admission/cmd/admission",
		"github.com/meridian-cp/meridian/services/apigateway/cmd/apigateway",
		"github.com/meridian-cp/meridian/services/flowcontrol/cmd/flowcontrol",
		"github.com/meridian-cp/meridian/services/store/cmd/store",
		"github.com/meridian-cp/meridian/services/watchfanout/cmd/watchfanout",
	}
	forbidden := []string{
		"k8s.io/client-go/kubernetes",
		"k8s.io/client-go/informers",
		"k8s.io/client-go/listers",
		"k8s.io/client-go/applyconfigurations",
		"k8s.io/apiserver/pkg/admission/plugin/policy/validating",
		"k8s.io/apiserver/pkg/cel/openapi/resolver",
	}
	for _, bin := range binaries {
		out, err := exec.CommandContext(t.Context(), goTool, "list", "-deps", bin).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", bin, err)
		}
		for _, pkg := range strings.Fields(string(out)) {
			for _, f := range forbidden {
				if pkg == f || strings.HasPrefix(pkg, f+"/") {
					t.Errorf("%s links %s", bin, pkg)
				}
			}
		}
	}
}
