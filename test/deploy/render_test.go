package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/runtime"
	serjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// render runs `helm template` on the chart with args (values files,
// --set, --api-versions) and returns its output; helm's stderr is in the
// error.
func render(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "meridian", chartDir, "--namespace", "mrd"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm template %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out, nil
}

// object is one rendered manifest: decoded into its k8s.io/api type, or
// (for CRDs' kinds) into a local struct of the CRD's schema.
type object struct {
	kind, name string
	typed      runtime.Object
}

// strictCodec decodes YAML into the k8s.io/api types, failing on any
// field the type does not have, a duplicate field, or a wrong type.
var strictCodec = serjson.NewSerializerWithOptions(serjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	serjson.SerializerOptions{Yaml: true, Strict: true})

// decodeAll splits helm's output into documents and decodes each strictly.
func decodeAll(t *testing.T, out []byte) []object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	var objs []object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading helm's output: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("manifest is not YAML: %v\n%s", err, doc)
		}
		o := object{kind: meta.Kind, name: meta.Metadata.Name}
		if crd, ok := crdKinds[meta.APIVersion+"/"+meta.Kind]; ok {
			if err := decodeCRD(doc, crd()); err != nil {
				t.Errorf("%s %s does not decode strictly into the CRD's schema: %v", meta.Kind, meta.Metadata.Name, err)
			}
			objs = append(objs, o)
			continue
		}
		obj, gvk, err := strictCodec.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("%s %s (%s) does not decode strictly into k8s.io/api: %v", meta.Kind, meta.Metadata.Name, meta.APIVersion, err)
			continue
		}
		if gvk.Kind != meta.Kind {
			t.Errorf("%s decoded as %s", meta.Kind, gvk.Kind)
		}
		o.typed = obj
		objs = append(objs, o)
	}
	return objs
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			b.Write(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// decodeCRD decodes doc into v, refusing unknown fields.
func decodeCRD(doc []byte, v any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// podSpecs returns the pod templates of the rendered workloads, by kind/name.
func podSpecs(objs []object) map[string]*corev1.PodSpec {
	specs := map[string]*corev1.PodSpec{}
	for _, o := range objs {
		switch w := o.typed.(type) {
		case *appsv1.Deployment:
			specs["Deployment/"+w.Name] = &w.Spec.Template.Spec
		case *appsv1.StatefulSet:
			// The claims of volumeClaimTemplates are the pod's volumes too.
			spec := w.Spec.Template.Spec.DeepCopy()
			for _, c := range w.Spec.VolumeClaimTemplates {
				spec.Volumes = append(spec.Volumes, corev1.Volume{Name: c.Name})
			}
			specs["StatefulSet/"+w.Name] = spec
		}
	}
	return specs
}

// flagLine is a flag in Go's flag.PrintDefaults output: "  -name type"
// (no type: a boolean flag).
var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][-A-Za-z0-9]*)(?: (\S+))?$`)

// flagSets caches each command's flags (name -> takes a value) as its
// --help lists them.
type flagSets struct {
	bin  string
	sets map[string]map[string]bool
}

// of returns the flags of command words (binary, then subcommands).
func (f *flagSets) of(t *testing.T, words []string) map[string]bool {
	t.Helper()
	key := strings.Join(words, " ")
	if s, ok := f.sets[key]; ok {
		return s
	}
	// --help exits 0 and prints to stderr (flag's default output).
	out, _ := exec.Command(f.bin+"/"+words[0], append(words[1:], "--help")...).CombinedOutput()
	s := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			s[m[1]] = m[2] != ""
		}
	}
	if len(s) == 0 {
		t.Fatalf("%s --help lists no flags:\n%s", key, out)
	}
	f.sets[key] = s
	return s
}

// findPDB returns the PodDisruptionBudget selecting component.
func findPDB(objs []object, component string) *policyv1.PodDisruptionBudget {
	for _, o := range objs {
		if p, ok := o.typed.(*policyv1.PodDisruptionBudget); ok && p.Spec.Selector.MatchLabels["app.kubernetes.io/component"] == component {
			return p
		}
	}
	return nil
}
