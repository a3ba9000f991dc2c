package crdschema

import (
	"reflect"
	"regexp"
	"strings"
	"unicode/utf8"

	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kube-openapi/pkg/validation/strfmt"
	"k8s.io/kube-openapi/pkg/validation/validate"
)

// passSchema is a quicker way to learn that an object passes upstream's
// OpenAPI schema validation (kube-openapi's validate.SchemaValidator, run
// by apiservervalidation.ValidateCustomResource and ...Update). Upstream
// builds a validator per schema node and value on every call; passSchema
// is a tree of node checkers compiled once per Schema from the same
// go-openapi schema upstream's validator is built from (the version's
// schema converted by apiservervalidation.NewSchemaValidator, unsupported
// formats already stripped as upstream strips them), so both read the same
// keywords.
//
// It answers only "valid": whenever it is not certain, because a check
// fails or the value or schema uses something it does not implement, the
// caller runs upstream's validator, which produces every error message and
// field path itself. An object upstream finds valid gets no errors from it,
// so the result is the same.
//
// Invariant (enforced by check, tested by TestPassSchemaMatchesUpstream):
// pass(v) ⇒ upstream's Validate(v) has no errors. It also holds for
// updates: upstream's ratcheting validator (ValidateUpdate with
// WithRatcheting) runs the same checks on the new value and only turns
// errors of unchanged values into warnings; allOf, anyOf, oneOf and not
// sub-validators get no ratcheting options (SchemaValidatorOptions.Options
// returns none), so they decide exactly as on create. Valid on create
// therefore implies valid on update.
type passSchema struct {
	root *schemaNode
}

// verdict is a node checker's answer. verdictInvalid is certain: upstream
// reports at least one error for the value at that node. verdictUnknown
// means passSchema cannot tell.
type verdict uint8

const (
	verdictValid verdict = iota
	verdictInvalid
	verdictUnknown
)

// worse is the verdict of two checks that must both pass: invalid if
// either is, else unknown if either is.
func worse(a, b verdict) verdict {
	if a == verdictInvalid || b == verdictInvalid {
		return verdictInvalid
	}
	if a == verdictUnknown || b == verdictUnknown {
		return verdictUnknown
	}
	return verdictValid
}

// Type names of go-openapi schemas.
const (
	typeString  = "string"
	typeInteger = "integer"
	typeNumber  = "number"
	typeBoolean = "boolean"
	typeArray   = "array"
	typeObject  = "object"
	typeNull    = "null"
)

// schemaNode checks a value against one schema node as upstream's
// validate.SchemaValidator does: its type, schema-props (allOf, anyOf,
// oneOf, not), string, format, number, slice, common (enum) and object
// validators, each applied to the value kinds upstream applies it to.
type schemaNode struct {
	// unsupported marks a node using a keyword passSchema does not
	// implement (patternProperties, dependencies, tuple items,
	// additionalItems, $ref, a pattern that does not compile): a value
	// reaching it is verdictUnknown.
	unsupported bool

	// Type validator: it applies when the node has a type or a format.
	checkType bool
	types     spec.StringOrArray
	nullable  bool
	format    string

	// Format validator: it applies to strings when the format is one the
	// registry knows (upstream's strfmt.Default).
	formatKnown bool

	// String validator.
	maxLength, minLength *int64
	pattern              *regexp.Regexp

	// Number validator.
	number numberChecks

	// Common validator: enum. enumStrings holds the enum's string values
	// when every value is of a JSON type, so a string matches only an
	// equal string (see enumMatch).
	enum        []any
	enumStrings []string
	enumJSON    bool

	// Slice validator.
	items              *schemaNode
	minItems, maxItems *int64
	uniqueItems        bool

	// Object validator.
	properties                   map[string]*schemaNode
	required                     []string
	minProperties, maxProperties *int64
	// noAdditional: additionalProperties false, only properties allowed.
	noAdditional bool
	// additional checks keys that are not properties, when
	// additionalProperties is a schema.
	additional *schemaNode

	// Schema-props validator.
	allOf, anyOf, oneOf []*schemaNode
	not                 *schemaNode
}

// numberChecks is upstream's numberValidator for one node: the type and
// format it checks value ranges against, and the multipleOf, maximum and
// minimum constraints.
type numberChecks struct {
	typeName, format string
	// alwaysInvalid: a constraint is out of the range of the node's type
	// and format, which upstream reports as an error for every number.
	alwaysInvalid bool
	multipleOf    *float64
	maximum       *float64
	exclusiveMax  bool
	minimum       *float64
	exclusiveMin  bool
}

// compileSchema compiles the go-openapi schema upstream's validator is
// built from; nil when there is none or passSchema cannot stand for
// upstream's validator on it.
func compileSchema(s *spec.Schema) *passSchema {
	if s == nil {
		return nil
	}
	if rootMarksImportant(s) {
		return nil
	}
	return &passSchema{root: compileNode(s)}
}

// rootMarksImportant reports whether a property declared at the root (by
// s or an allOf, anyOf, oneOf or not below it, which validate at the same
// path) starts with "IMPORTANT!". Upstream keeps the errors of oneOf
// alternatives whose message starts so even when one alternative passes,
// and a message about such a property starts with its name.
func rootMarksImportant(s *spec.Schema) bool {
	for name := range s.Properties {
		if strings.HasPrefix(name, "IMPORTANT!") {
			return true
		}
	}
	for _, subs := range [][]spec.Schema{s.AllOf, s.AnyOf, s.OneOf} {
		for i := range subs {
			if rootMarksImportant(&subs[i]) {
				return true
			}
		}
	}
	return s.Not != nil && rootMarksImportant(s.Not)
}

// compileNode compiles one schema node and every node below it.
func compileNode(s *spec.Schema) *schemaNode {
	n := &schemaNode{
		checkType:     len(s.Type) > 0 || s.Format != "",
		types:         s.Type,
		nullable:      s.Nullable,
		format:        s.Format,
		formatKnown:   strfmt.Default.ContainsName(s.Format),
		maxLength:     s.MaxLength,
		minLength:     s.MinLength,
		enum:          s.Enum,
		minItems:      s.MinItems,
		maxItems:      s.MaxItems,
		uniqueItems:   s.UniqueItems,
		required:      s.Required,
		minProperties: s.MinProperties,
		maxProperties: s.MaxProperties,
	}
	if s.Ref.String() != "" || len(s.PatternProperties) > 0 || len(s.Dependencies) > 0 ||
		s.AdditionalItems != nil || (s.Items != nil && len(s.Items.Schemas) > 0) {
		n.unsupported = true
		return n
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			n.unsupported = true
			return n
		}
		n.pattern = re
	}
	n.compileEnum()
	n.number = compileNumber(s)
	if s.Items != nil && s.Items.Schema != nil {
		n.items = compileNode(s.Items.Schema)
	}
	if s.Properties != nil {
		n.properties = make(map[string]*schemaNode, len(s.Properties))
		for k := range s.Properties {
			prop := s.Properties[k]
			n.properties[k] = compileNode(&prop)
		}
	}
	if ap := s.AdditionalProperties; ap != nil {
		if !ap.Allows {
			n.noAdditional = true
		} else if ap.Schema != nil {
			n.additional = compileNode(ap.Schema)
		}
	}
	for i := range s.AllOf {
		n.allOf = append(n.allOf, compileNode(&s.AllOf[i]))
	}
	for i := range s.AnyOf {
		n.anyOf = append(n.anyOf, compileNode(&s.AnyOf[i]))
	}
	for i := range s.OneOf {
		n.oneOf = append(n.oneOf, compileNode(&s.OneOf[i]))
	}
	if s.Not != nil {
		n.not = compileNode(s.Not)
	}
	return n
}

// compileEnum prepares the string fast path of the enum check.
func (n *schemaNode) compileEnum() {
	n.enumJSON = true
	for _, e := range n.enum {
		switch e := e.(type) {
		case string:
			n.enumStrings = append(n.enumStrings, e)
		case nil, bool, int64, float64, map[string]any, []any:
		default:
			n.enumJSON = false
		}
	}
}

// compileNumber prepares upstream's numberValidator for s: the type and
// format are passed on only when the type is unambiguous and the format
// fits it, as upstream's SchemaValidator.numberValidator does.
func compileNumber(s *spec.Schema) numberChecks {
	var c numberChecks
	if len(s.Type) == 1 {
		switch s.Type[0] {
		case typeInteger:
			c.typeName = typeInteger
			if s.Format == "int32" || s.Format == "int64" {
				c.format = s.Format
			}
		case typeNumber:
			c.typeName = typeNumber
			if s.Format == "float" || s.Format == "double" {
				c.format = s.Format
			}
		}
	}
	c.multipleOf, c.maximum, c.exclusiveMax, c.minimum, c.exclusiveMin = s.MultipleOf, s.Maximum, s.ExclusiveMaximum, s.Minimum, s.ExclusiveMinimum
	for _, bound := range []*float64{c.multipleOf, c.maximum, c.minimum} {
		if bound != nil && validate.IsValueValidAgainstRange(*bound, c.typeName, c.format, "", "") != nil {
			c.alwaysInvalid = true
		}
	}
	return c
}

// pass reports whether upstream's validator certainly finds no error in v.
func (p *passSchema) pass(v any) bool {
	return p != nil && p.root.check(v) == verdictValid
}

// check is upstream's SchemaValidator.Validate for values decoded from
// JSON (nil, string, bool, int64, float64, []any, map[string]any); any
// other Go type is verdictUnknown.
func (n *schemaNode) check(v any) verdict {
	if n.unsupported {
		return verdictUnknown
	}
	if v == nil {
		// Upstream runs only the type and common validators on null.
		if n.checkType && len(n.types) > 0 && !n.types.Contains(typeNull) && !n.nullable {
			return verdictInvalid
		}
		if len(n.enum) > 0 {
			return verdictInvalid
		}
		return verdictValid
	}
	var res verdict
	switch x := v.(type) {
	case string:
		if n.checkType && !n.typeAccepts(reflect.String, typeString, "") {
			return verdictInvalid
		}
		if res = n.checkProps(v); res == verdictInvalid || !n.stringOK(x) {
			return verdictInvalid
		}
	case bool:
		if n.checkType && !n.typeAccepts(reflect.Bool, typeBoolean, "") {
			return verdictInvalid
		}
		res = n.checkProps(v)
	case int64:
		if n.checkType && !n.typeAccepts(reflect.Int64, typeInteger, "int64") {
			return verdictInvalid
		}
		res = worse(n.checkProps(v), n.number.checkInt(x))
	case float64:
		if n.checkType && n.types.Contains(typeInteger) {
			// Upstream accepts a float that is a JSON integer here
			// (swag's IsFloat64AJSONInteger); left to upstream.
			return verdictUnknown
		}
		if n.checkType && !n.typeAccepts(reflect.Float64, typeNumber, "float64") {
			return verdictInvalid
		}
		res = worse(n.checkProps(v), n.number.checkFloat(x))
	case []any:
		if n.checkType && !n.typeAccepts(reflect.Slice, typeArray, "") {
			return verdictInvalid
		}
		res = worse(n.checkProps(v), n.checkSlice(x))
	case map[string]any:
		if n.checkType && !n.typeAccepts(reflect.Map, typeObject, "") {
			return verdictInvalid
		}
		res = worse(n.checkProps(v), n.checkObject(x))
	default:
		return verdictUnknown
	}
	if res == verdictInvalid {
		return res
	}
	if len(n.enum) > 0 && !n.enumMatch(v) {
		return verdictInvalid
	}
	return res
}

// typeAccepts is upstream's typeValidator for a non-null value of the
// given kind, whose JSON type and format upstream infers as schType and
// format. Floats on a node whose type includes integer never get here.
func (n *schemaNode) typeAccepts(kind reflect.Kind, schType, format string) bool {
	isIntFloat := schType == typeInteger && n.types.Contains(typeNumber)
	if kind != reflect.String && kind != reflect.Slice && n.format != "" &&
		!(n.types.Contains(schType) || format == n.format || isIntFloat) {
		return false
	}
	if !(n.types.Contains(typeNumber) || n.types.Contains(typeInteger)) && n.format != "" &&
		(kind == reflect.String || kind == reflect.Slice) {
		return true
	}
	return n.types.Contains(schType) || isIntFloat
}

// stringOK is upstream's string validator (lengths counted in runes,
// pattern) and its format validator.
func (n *schemaNode) stringOK(s string) bool {
	if n.maxLength != nil || n.minLength != nil {
		l := int64(utf8.RuneCountInString(s))
		if (n.maxLength != nil && l > *n.maxLength) || (n.minLength != nil && l < *n.minLength) {
			return false
		}
	}
	if n.pattern != nil && !n.pattern.MatchString(s) {
		return false
	}
	if n.formatKnown && !strfmt.Default.Validates(n.format, s) {
		return false
	}
	return true
}

// checkInt is upstream's numberValidator for an int64 value.
func (c *numberChecks) checkInt(v int64) verdict {
	if c.alwaysInvalid {
		return verdictInvalid
	}
	// The value's own range: an int64 always parses as an int64 and a
	// float32; only int32 can be out of range.
	if c.typeName == typeInteger && c.format == "int32" && (v < -1<<31 || v > 1<<31-1) {
		return verdictInvalid
	}
	return c.bounds(v)
}

// checkFloat is upstream's numberValidator for a float64 value.
func (c *numberChecks) checkFloat(v float64) verdict {
	if c.alwaysInvalid {
		return verdictInvalid
	}
	if c.typeName == typeInteger || (c.typeName == typeNumber && c.format == "float") {
		if validate.IsValueValidAgainstRange(v, c.typeName, c.format, "", "") != nil {
			return verdictInvalid
		}
	}
	return c.bounds(v)
}

// bounds checks multipleOf, maximum and minimum with upstream's own
// functions; every bound is within the node's range (alwaysInvalid is
// false), so upstream compares in the value's native type.
func (c *numberChecks) bounds(v any) verdict {
	if c.multipleOf != nil && validate.MultipleOfNativeType("", "", v, *c.multipleOf) != nil {
		return verdictInvalid
	}
	if c.maximum != nil && validate.MaximumNativeType("", "", v, *c.maximum, c.exclusiveMax) != nil {
		return verdictInvalid
	}
	if c.minimum != nil && validate.MinimumNativeType("", "", v, *c.minimum, c.exclusiveMin) != nil {
		return verdictInvalid
	}
	return verdictValid
}

// enumMatch is upstream's common validator: v matches an enum value when
// it converts to that value's type and is then deeply equal to it.
func (n *schemaNode) enumMatch(v any) bool {
	if s, ok := v.(string); ok && n.enumJSON {
		// A string converts to none of the other JSON types.
		for _, e := range n.enumStrings {
			if s == e {
				return true
			}
		}
		return false
	}
	for _, e := range n.enum {
		t := reflect.TypeOf(e)
		if t == nil {
			continue
		}
		ev := reflect.ValueOf(v)
		if ev.IsValid() && ev.Type().ConvertibleTo(t) && reflect.DeepEqual(ev.Convert(t).Interface(), e) {
			return true
		}
	}
	return false
}

// checkProps is upstream's schema-props validator: anyOf (one passes),
// oneOf (exactly one passes), allOf (all pass) and not (does not pass).
func (n *schemaNode) checkProps(v any) verdict {
	res := verdictValid
	if len(n.anyOf) > 0 {
		anyOf := verdictInvalid
		for _, sub := range n.anyOf {
			r := sub.check(v)
			if r == verdictValid {
				anyOf = verdictValid
				break
			}
			if r == verdictUnknown {
				anyOf = verdictUnknown
			}
		}
		if res = worse(res, anyOf); res == verdictInvalid {
			return res
		}
	}
	if len(n.oneOf) > 0 {
		valid, unknown := 0, false
		for _, sub := range n.oneOf {
			switch sub.check(v) {
			case verdictValid:
				valid++
			case verdictUnknown:
				unknown = true
			}
		}
		switch {
		case valid > 1:
			return verdictInvalid
		case unknown:
			res = verdictUnknown
		case valid == 0:
			return verdictInvalid
		}
	}
	for _, sub := range n.allOf {
		if res = worse(res, sub.check(v)); res == verdictInvalid {
			return res
		}
	}
	if n.not != nil {
		switch n.not.check(v) {
		case verdictValid:
			return verdictInvalid
		case verdictUnknown:
			res = verdictUnknown
		}
	}
	return res
}

// checkSlice is upstream's slice validator.
func (n *schemaNode) checkSlice(l []any) verdict {
	size := int64(len(l))
	if (n.minItems != nil && size < *n.minItems) || (n.maxItems != nil && size > *n.maxItems) {
		return verdictInvalid
	}
	if n.uniqueItems && validate.UniqueItems("", "", l) != nil {
		return verdictInvalid
	}
	res := verdictValid
	if n.items != nil {
		for _, item := range l {
			if res = worse(res, n.items.check(item)); res == verdictInvalid {
				return res
			}
		}
	}
	return res
}

// checkObject is upstream's object validator: property counts, allowed
// keys, properties, additional properties and required keys.
func (n *schemaNode) checkObject(m map[string]any) verdict {
	size := int64(len(m))
	if (n.minProperties != nil && size < *n.minProperties) || (n.maxProperties != nil && size > *n.maxProperties) {
		return verdictInvalid
	}
	for _, k := range n.required {
		if _, ok := m[k]; !ok {
			return verdictInvalid
		}
	}
	res := verdictValid
	for k, v := range m {
		var r verdict
		if prop, ok := n.properties[k]; ok {
			r = prop.check(v)
		} else if n.noAdditional {
			return verdictInvalid
		} else if n.additional != nil {
			r = n.additional.check(v)
		}
		if res = worse(res, r); res == verdictInvalid {
			return res
		}
	}
	return res
}
