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
	// One go list for all: a line per binary, its path then its packages.
	args := append([]string{"list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}, binaries...)
	out, err := exec.CommandContext(t.Context(), goTool, args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		pkgs := strings.Fields(line)
		if len(pkgs) == 0 {
			continue
		}
		bin := pkgs[0]
		for _, pkg := range pkgs[1:] {
			for _, f := range forbidden {
				if pkg == f || strings.HasPrefix(pkg, f+"/") {
					t.Errorf("%s links %s", bin, pkg)
				}
			}
		}
	}
}
