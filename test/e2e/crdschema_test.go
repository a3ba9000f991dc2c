package e2e

import (
	"regexp"
	"strings"
	"testing"
)

// gadgetCRD has a schema with a default, an enum, a minimum, a CEL rule, a
// transition rule and a listType=map list.
const gadgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [color]
            x-kubernetes-validations:
            - rule: "self.min <= self.max"
              message: "min must not exceed max"
            - rule: "!has(oldSelf.color) || self.color == oldSelf.color"
              message: "color is immutable"
            properties:
              color:
                type: string
                enum: [red, blue]
              min: {type: integer, minimum: 0, default: 0}
              max: {type: integer, default: 10}
              mode: {type: string, default: auto}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
`

// TestCRDSchema: custom resources are pruned, defaulted and validated
// against the CRD's schema and CEL rules, with kube-apiserver's 422 text,
// and server-side apply merges a listType=map list from two managers.
func TestCRDSchema(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("demo")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", gadgetCRD))
	cp.waitEstablished("gadgets.example.com")

	// Pruning (an unknown field, dropped; kubectl's default strict
	// validation turns it into an error, Ignore drops it) and defaulting.
	_, errOut, err := cp.kubectlErr("-n", "demo", "apply", "-f", manifest(t, "g.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {color: red, bogus: 1}\n"))
	if err == nil || !strings.Contains(errOut, `unknown field "spec.bogus"`) {
		t.Errorf("strict apply of an unknown field: %v %s", err, errOut)
	}
	cp.kubectl("-n", "demo", "apply", "--validate=false", "-f", manifest(t, "g.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {color: red, bogus: 1}\n"))
	if got := cp.kubectl("-n", "demo", "get", "gadget", "g1", "-o", "jsonpath={.spec}"); strings.Contains(got, "bogus") {
		t.Errorf("the unknown field was stored: %s", got)
	}
	y := cp.kubectl("-n", "demo", "get", "gadget", "g1", "-o", "yaml")
	for _, want := range []string{"min: 0", "max: 10", "mode: auto", "color: red"} {
		if !strings.Contains(y, want) {
			t.Errorf("the stored object lacks default %q:\n%s", want, y)
		}
	}

	// Invalid objects: 422 with the field and the rule's message.
	for _, c := range []struct{ spec, want string }{
		{`{color: green}`, `spec.color: Unsupported value: "green": supported values: "red", "blue"`},
		{`{color: red, min: -1}`, `spec.min: Invalid value: -1: spec.min in body should be greater than or equal to 0`},
		{`{color: red, min: 5, max: 1}`, `spec: Invalid value: min must not exceed max`},
		{`{min: 1}`, `spec.color: Required value`},
	} {
		_, errOut, err := cp.kubectlErr("-n", "demo", "apply", "-f", manifest(t, "bad.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: bad}\nspec: "+c.spec+"\n"))
		if err == nil || !strings.Contains(errOut, `The Gadget "bad" is invalid`) || !strings.Contains(errOut, c.want) {
			t.Errorf("spec %s: %v\n%s\nwant %q", c.spec, err, errOut, c.want)
		}
	}
	if _, errOut, err := cp.kubectlErr("-n", "demo", "get", "gadget", "bad"); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Errorf("an invalid object was stored: %v %s", err, errOut)
	}
	// The transition rule: color may not change.
	_, errOut, err = cp.kubectlErr("-n", "demo", "patch", "gadget", "g1", "--type=merge", "-p", `{"spec":{"color":"blue"}}`)
	if err == nil || !strings.Contains(errOut, "color is immutable") {
		t.Errorf("changing color: %v %s", err, errOut)
	}

	// Server-side apply: two managers own one port each of a map list.
	cp.kubectl("-n", "demo", "apply", "--server-side", "--field-manager=alice", "-f", manifest(t, "a.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g2}\nspec:\n  color: blue\n  ports:\n  - {name: http, port: 80}\n"))
	cp.kubectl("-n", "demo", "apply", "--server-side", "--field-manager=bob", "-f", manifest(t, "b.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g2}\nspec:\n  color: blue\n  ports:\n  - {name: https, port: 443}\n"))
	if got := cp.kubectl("-n", "demo", "get", "gadget", "g2", "-o", "jsonpath={range .spec.ports[*]}{.name}={.port} {end}"); got != "http=80 https=443 " {
		t.Errorf("ports after two managers' applies: %q", got)
	}
	// alice gives up her port: only hers goes.
	cp.kubectl("-n", "demo", "apply", "--server-side", "--field-manager=alice", "-f", manifest(t, "a.yaml", "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g2}\nspec:\n  color: blue\n"))
	if got := cp.kubectl("-n", "demo", "get", "gadget", "g2", "-o", "jsonpath={range .spec.ports[*]}{.name}={.port} {end}"); got != "https=443 " {
		t.Errorf("ports after alice's port was dropped: %q", got)
	}
}

// TestCRDExplain: kubectl explain describes a custom resource's fields
// from the CRD's schema, served in OpenAPI v3 and v2 as soon as it is
// established.
func TestCRDExplain(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", gadgetCRD))
	cp.waitEstablished("gadgets.example.com")
	out := cp.kubectl("explain", "gadgets.spec")
	for _, want := range []string{"GROUP:      example.com", "KIND:       Gadget", "VERSION:    v1", "color\t<string> -required-", "ports\t<[]Object>"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain gadgets.spec lacks %q:\n%s", want, out)
		}
	}
	// The same from /openapi/v2, where kubectl falls back to it.
	out = cp.kubectl("explain", "gadgets.spec", "--output", "plaintext-openapiv2")
	for _, want := range []string{`KIND:\s+Gadget`, `VERSION:\s+example.com/v1`, `color\s+<string> -required-`, `ports\s+<\[\]Object>`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("kubectl explain gadgets.spec --output plaintext-openapiv2 lacks %q:\n%s", want, out)
		}
	}
}
