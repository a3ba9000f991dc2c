package crdschema

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// gadgetsHeader starts every test CRD up to its versions list.
const gadgetsHeader = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
`

// crdWithSchema is a one-version CRD whose openAPIV3Schema.properties.spec
// is specYAML.
func crdWithSchema(specYAML string) string {
	return crdWithRootSchema("type: object\nproperties:\n  spec:\n" + indent(specYAML, "    "))
}

// crdWithRootSchema is a one-version CRD whose openAPIV3Schema is
// rootYAML.
func crdWithRootSchema(rootYAML string) string {
	return gadgetsHeader + `  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
` + indent(rootYAML, "        ") + "\n"
}

// indent prefixes every line of doc with prefix.
func indent(doc, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimRight(doc, "\n"), "\n", "\n"+prefix)
}

// crdWithVersions is the CRD with the given versions list (YAML, indented
// two spaces).
func crdWithVersions(versions string) string {
	return gadgetsHeader + versions
}

const schemaV = "    schema: {openAPIV3Schema: {type: object}}\n"

func TestValidateDefinitionCreate(t *testing.T) {
	// A single version's schema is reported under spec.validation, as
	// upstream (the v1→internal conversion hoists a schema shared by all
	// versions there).
	root := "spec.validation.openAPIV3Schema.properties[spec]"
	for _, tc := range []struct {
		name string
		crd  string
		want []string
	}{
		{"widgets valid", "", nil},
		{"valid spec", crdWithSchema("type: object\nproperties:\n  a: {type: string}"), nil},
		{"name must be plural.group", strings.Replace(crdWithSchema("type: object"), "name: gadgets.example.com", "name: things.example.com", 1),
			[]string{`metadata.name: Invalid value: "things.example.com": must be spec.names.plural+"."+spec.group`}},
		{"kind must be a DNS label", strings.Replace(crdWithSchema("type: object"), "kind: Gadget,", "kind: Gad get,", 1),
			[]string{`spec.names.kind: Invalid value: "Gad get": may have mixed case, but should otherwise match: a DNS-1035 label must consist of lower case alphanumeric characters`}},
		{"listKind differs from kind", strings.Replace(crdWithSchema("type: object"), "listKind: GadgetList", "listKind: Gadget", 1),
			[]string{`spec.names.listKind: Invalid value: "Gadget": kind and listKind may not be the same`}},
		{"plural lowercase", strings.Replace(crdWithSchema("type: object"), "plural: gadgets,", "plural: Gadgets,", 1),
			[]string{`spec.names.plural: Invalid value: "Gadgets"`}},
		{"not structural: type missing", crdWithSchema("properties:\n  a: {type: string}"),
			[]string{root + `.type: Required value: must not be empty for specified object fields`}},
		{"not structural: nested type missing", crdWithSchema("type: object\nproperties:\n  a: {description: x}"),
			[]string{root + `.properties[a].type: Required value: must not be empty for specified object fields`}},
		{"unknown type", crdWithSchema("type: thing"),
			[]string{root + `.type: Unsupported value: "thing": supported values: "array", "boolean", "integer", "number", "object", "string"`}},
		{"unknown format is accepted", crdWithSchema("type: string\nformat: not-a-format"), nil},
		{"default must validate", crdWithSchema("type: object\nproperties:\n  num: {type: integer, maximum: 3, default: 5}"),
			[]string{root + `.properties[num].default: Invalid value: 5:  in body should be less than or equal to 3`}},
		{"default must be pruned", crdWithSchema("type: object\nproperties:\n  o:\n    type: object\n    properties: {a: {type: string}}\n    default: {a: x, b: z}"),
			[]string{root + `.properties[o].default: Invalid value: {"a":"x","b":"z"}: must not have unknown fields`}},
		{"int-or-string with embedded-resource", crdWithSchema("type: object\nproperties:\n  p: {x-kubernetes-int-or-string: true, x-kubernetes-embedded-resource: true}"),
			[]string{root + `.properties[p].x-kubernetes-embedded-resource: Invalid value: true: must be false if x-kubernetes-int-or-string is true`}},
		{"preserve-unknown-fields false", crdWithSchema("type: object\nx-kubernetes-preserve-unknown-fields: false"),
			[]string{root + `.x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined`}},
		{"embedded resource not object", crdWithSchema("type: object\nproperties:\n  e: {type: string, x-kubernetes-embedded-resource: true}"),
			[]string{root + `.properties[e].type: Invalid value: "string": must be object if x-kubernetes-embedded-resource is true`}},
		{"list-map-keys without list-type map", crdWithSchema("type: object\nproperties:\n  l:\n    type: array\n    x-kubernetes-list-map-keys: [name]\n    items: {type: object, properties: {name: {type: string}}}"),
			[]string{root + `.properties[l].x-kubernetes-list-type: Required value: must be map if x-kubernetes-list-map-keys is non-empty`}},
		{"list-type map key must be required or defaulted", crdWithSchema("type: object\nproperties:\n  l:\n    type: array\n    x-kubernetes-list-type: map\n    x-kubernetes-list-map-keys: [name]\n    items: {type: object, properties: {name: {type: string}}}"),
			[]string{root + `.properties[l].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property`}},
		{"list-type set of objects", crdWithSchema("type: object\nproperties:\n  l:\n    type: array\n    x-kubernetes-list-type: set\n    items: {type: object, properties: {name: {type: string}}}"),
			[]string{root + `.properties[l].items.x-kubernetes-map-type: Invalid value: null: must be atomic as item of a list with x-kubernetes-list-type=set`}},
		{"map-type on a string", crdWithSchema("type: object\nproperties:\n  m: {type: string, x-kubernetes-map-type: granular}"),
			[]string{root + `.properties[m].type: Invalid value: "string": must be object if x-kubernetes-map-type is specified`}},
		{"rule does not compile", crdWithSchema("type: object\nx-kubernetes-validations:\n- rule: self.nope()"),
			[]string{root + `.x-kubernetes-validations[0].rule: Invalid value: {"Rule":"self.nope()"`, `compilation failed: ERROR: <input>:1:10: undeclared reference to 'nope'`}},
		{"rule must be boolean", crdWithSchema("type: object\nx-kubernetes-validations:\n- rule: \"1\""),
			[]string{`must evaluate to a bool`}},
		{"messageExpression does not compile", crdWithSchema("type: object\nx-kubernetes-validations:\n- rule: \"true\"\n  messageExpression: \"1 +\""),
			[]string{root + `.x-kubernetes-validations[0].messageExpression: Invalid value: {"Rule":"true","Message":"","MessageExpression":"1 +"`, "messageExpression compilation failed: ERROR: <input>:1:4: Syntax error"}},
		{"bad fieldPath", crdWithSchema("type: object\nproperties:\n  a: {type: string}\nx-kubernetes-validations:\n- rule: \"true\"\n  fieldPath: .b"),
			[]string{root + `.x-kubernetes-validations[0].fieldPath: Invalid value: ".b": must be a valid path`}},
		{"bad reason", crdWithSchema("type: object\nx-kubernetes-validations:\n- rule: \"true\"\n  reason: Sometimes"),
			[]string{root + `.x-kubernetes-validations[0].reason: Unsupported value: "Sometimes": supported values: "FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"`}},
		{"rule too costly", crdWithSchema("type: object\nproperties:\n  l:\n    type: array\n    items: {type: string}\nx-kubernetes-validations:\n- rule: self.l.all(x, self.l.all(y, x == y))"),
			[]string{root + `.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of`}},
		{"CRD too costly", crdWithSchema(costlyCRD()),
			[]string{`spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema exceeds budget by factor of`}},
		{"transition rule under an atomic list", crdWithSchema("type: object\nproperties:\n  l:\n    type: array\n    maxItems: 10\n    items:\n      type: string\n      maxLength: 10\n      x-kubernetes-validations:\n      - rule: self == oldSelf"),
			[]string{root + `.properties[l].items.x-kubernetes-validations[0].rule: Invalid value: "self == oldSelf": oldSelf cannot be used on the uncorrelatable portion of the schema within spec.validation.openAPIV3Schema.properties[spec].properties[l]`}},
		{"transition rule under a map list", crdWithSchema("type: object\nproperties:\n  l:\n    type: array\n    maxItems: 10\n    x-kubernetes-list-type: map\n    x-kubernetes-list-map-keys: [k]\n    items:\n      type: object\n      required: [k]\n      properties: {k: {type: string, maxLength: 10}, v: {type: string, maxLength: 10}}\n      x-kubernetes-validations:\n      - rule: self.v == oldSelf.v"), nil},
		{"optionalOldSelf needs oldSelf", crdWithSchema("type: object\nx-kubernetes-validations:\n- rule: \"true\"\n  optionalOldSelf: true"),
			[]string{root + `.x-kubernetes-validations[0].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule`}},
		{"no storage version", crdWithVersions("  - name: v1\n    served: true\n    storage: false\n" + schemaV),
			[]string{`spec.versions: Invalid value: [{"Name":"v1","Served":true,"Storage":false`, `must have exactly one version marked as storage version`}},
		{"two storage versions", crdWithVersions("  - name: v1\n    served: true\n    storage: true\n" + schemaV + "  - name: v2\n    served: true\n    storage: true\n" + schemaV),
			[]string{`must have exactly one version marked as storage version`}},
		{"duplicate version", crdWithVersions("  - name: v1\n    served: true\n    storage: true\n" + schemaV + "  - name: v1\n    served: true\n    storage: false\n" + schemaV),
			[]string{`must contain unique version names`}},
		{"version name", crdWithVersions("  - name: V_1\n    served: true\n    storage: true\n" + schemaV),
			[]string{`spec.versions[0].name: Invalid value: "V_1"`}},
		{"schema required", crdWithVersions("  - name: v1\n    served: true\n    storage: true\n"),
			[]string{`spec.versions[0].schema.openAPIV3Schema: Required value`}},
		{"two versions, None conversion", crdWithVersions("  - name: v1\n    served: true\n    storage: true\n" + schemaV + "  - name: v2\n    served: true\n    storage: false\n    deprecated: true\n    deprecationWarning: use v1\n" + schemaV), nil},
		{"webhook conversion needs a client config", crdWithVersions("  - name: v1\n    served: true\n    storage: true\n"+schemaV) + "  conversion:\n    strategy: Webhook\n",
			[]string{`spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook`, `spec.conversion.conversionReviewVersions: Required value`}},
		{"status subresource with extra root fields", strings.Replace(crdWithSchema("type: object"), "        type: object\n        properties:\n", "        type: object\n        description: x\n        properties:\n", 1), nil},
		{"root may not set additionalProperties with properties", strings.Replace(crdWithSchema("type: object"), "        type: object\n        properties:\n", "        type: object\n        additionalProperties: {type: string}\n        properties:\n", 1),
			[]string{`spec.validation.openAPIV3Schema.additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := loadCRD(t, "widgets.yaml")
			if tc.crd != "" {
				crd = parseCRD(t, tc.crd)
			}
			errs := ValidateDefinition(context.Background(), crd, nil)
			wantErrs(t, errs, tc.want)
			if len(tc.want) == 0 {
				if _, err := Compile(crd, crd.Spec.Versions[0].Name); err != nil {
					t.Fatalf("Compile of a valid CRD: %v", err)
				}
			}
		})
	}
}

// costlyCRD is a spec schema with many rules, each under the per-rule
// limit, that together exceed the per-CRD estimated cost limit.
func costlyCRD() string {
	var b strings.Builder
	b.WriteString("type: object\nproperties:\n  l:\n    type: array\n    maxItems: 1000\n    items: {type: string, maxLength: 100}\nx-kubernetes-validations:\n")
	for i := range 60 {
		fmt.Fprintf(&b, "- rule: self.l.all(x, self.l.exists(y, x + '%d' == y))\n", i)
	}
	return b.String()
}

func TestValidateDefinitionUpdate(t *testing.T) {
	old := loadCRD(t, "widgets.yaml")
	PrepareForCreate(old)
	old.ResourceVersion = "5" // as stored; an update carries it

	t.Run("unchanged", func(t *testing.T) {
		wantErrs(t, ValidateDefinition(context.Background(), old.DeepCopy(), old), nil)
	})
	t.Run("names of an established CRD are immutable", func(t *testing.T) {
		est := old.DeepCopy()
		est.Status.Conditions = append(est.Status.Conditions, establishedCondition())
		crd := est.DeepCopy()
		crd.Spec.Names.Kind = "Gizmo"
		wantErrs(t, ValidateDefinition(context.Background(), crd, est), []string{`spec.names.kind: Invalid value: "Gizmo": field is immutable`})
		crd.Spec.Names.Kind = "Widget"
		crd.Spec.Scope = "Cluster"
		wantErrs(t, ValidateDefinition(context.Background(), crd, est), []string{`spec.scope: Invalid value: "Cluster": field is immutable`})
		// Before it is established, kind and scope may change.
		wantErrs(t, ValidateDefinition(context.Background(), crd, old), nil)
	})
	t.Run("plural and group are immutable", func(t *testing.T) {
		crd := old.DeepCopy()
		crd.Spec.Names.Plural = "gizmos"
		crd.Spec.Group = "example.org"
		wantErrs(t, ValidateDefinition(context.Background(), crd, old), []string{`spec.names.plural: Invalid value: "gizmos": field is immutable`, `spec.group: Invalid value: "example.org": field is immutable`})
	})
	t.Run("new storage version is added to storedVersions", func(t *testing.T) {
		crd := old.DeepCopy()
		v2 := crd.Spec.Versions[0].DeepCopy()
		v2.Name = "v2"
		crd.Spec.Versions[0].Storage = false
		crd.Spec.Versions = append(crd.Spec.Versions, *v2)
		wantErrs(t, ValidateDefinition(context.Background(), crd, old), nil)
		if changed := PrepareForUpdate(crd, old); !changed {
			t.Fatal("spec change not reported")
		}
		if got := strings.Join(crd.Status.StoredVersions, ","); got != "v1,v2" {
			t.Fatalf("storedVersions = %s, want v1,v2", got)
		}
	})
	t.Run("removing a stored version", func(t *testing.T) {
		crd := old.DeepCopy()
		crd.Spec.Versions[0].Name = "v2"
		wantErrs(t, ValidateDefinition(context.Background(), crd, old), []string{`status.storedVersions[0]: Invalid value: "v1": missing from spec.versions; v1 was previously a storage version`})
	})
}
