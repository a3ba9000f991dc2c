package admitattrs

import (
	"strconv"
	"unicode/utf8"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// maxFastDepth bounds the nesting the fast decoder follows; deeper
// documents are left to the fallback (which has its own limit).
const maxFastDepth = 1000

// unmarshalObject decodes data, a JSON object, into the map
// k8s.io/apimachinery's json.Unmarshal produces (map[string]any, []any,
// string, int64 for an integer that fits, float64 for another number,
// bool and nil values), and fails as it does. Integers are int64, as
// kube-apiserver's unstructured objects have them, so that CEL sees
// `object.spec.replicas` as an int (`% 2` has no double overload).
//
// The objects the gateway sends are plain JSON: strings without escapes,
// numbers, nesting. fastDecoder reads those in one pass, where
// encoding/json reads every byte twice (validation, then decoding) through
// its scanner's state machine. Anything it does not read exactly as the
// fallback does (escapes, invalid UTF-8, control characters, a number out
// of range, malformed JSON, deep nesting) makes it give up, and the
// fallback decodes the document instead.
func unmarshalObject(data []byte) (map[string]any, error) {
	d := fastDecoder{data: data, text: string(data)}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == '{' {
		if m, ok := d.object(0); ok {
			if d.space(); d.i == len(d.data) {
				return m, nil
			}
		}
	}
	m := map[string]any{}
	if err := utiljson.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// fastDecoder reads a JSON document from data, at offset i. Each method
// reports false, leaving i anywhere, when the input is not what it reads
// exactly as encoding/json does.
type fastDecoder struct {
	data []byte
	// text is data as one string: every string decoded is a substring of
	// it, one allocation for the document rather than one per string.
	text string
	i    int
}

func (d *fastDecoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) value(depth int) (any, bool) {
	if d.i >= len(d.data) {
		return nil, false
	}
	switch c := d.data[d.i]; {
	case c == '{':
		m, ok := d.object(depth + 1)
		return m, ok
	case c == '[':
		return d.array(depth + 1)
	case c == '"':
		s, ok := d.string()
		return s, ok
	case c == 't':
		return true, d.literal("true")
	case c == 'f':
		return false, d.literal("false")
	case c == 'n':
		return nil, d.literal("null")
	case c == '-' || ('0' <= c && c <= '9'):
		return d.number()
	}
	return nil, false
}

// object reads an object starting at its '{'.
func (d *fastDecoder) object(depth int) (map[string]any, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	d.i++ // '{'
	m := map[string]any{}
	d.space()
	if d.i < len(d.data) && d.data[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return nil, false
		}
		k, ok := d.string()
		if !ok {
			return nil, false
		}
		d.space()
		if d.i >= len(d.data) || d.data[d.i] != ':' {
			return nil, false
		}
		d.i++
		d.space()
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		// A repeated key keeps its last value, as in encoding/json.
		m[k] = v
		if done, ok := d.next('}'); !ok || done {
			return m, ok
		}
	}
}

// array reads an array starting at its '['; an empty one is an empty,
// non-nil slice, as in encoding/json.
func (d *fastDecoder) array(depth int) ([]any, bool) {
	if depth > maxFastDepth {
		return nil, false
	}
	d.i++ // '['
	a := make([]any, 0)
	d.space()
	if d.i < len(d.data) && d.data[d.i] == ']' {
		d.i++
		return a, true
	}
	for {
		v, ok := d.value(depth)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if done, ok := d.next(']'); !ok || done {
			return a, ok
		}
	}
}

// next reads what follows a member of an object or array: a ',' (and
// the space after it), or closing, which ends it (done).
func (d *fastDecoder) next(closing byte) (done, ok bool) {
	d.space()
	if d.i >= len(d.data) {
		return false, false
	}
	switch d.data[d.i] {
	case ',':
		d.i++
		d.space()
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
}

// string reads a string starting at its '"'. Escapes, control characters
// and invalid UTF-8 (which encoding/json replaces) are left to
// encoding/json.
func (d *fastDecoder) string() (string, bool) {
	start := d.i + 1
	ascii := true
	for j := start; j < len(d.data); j++ {
		switch c := d.data[j]; {
		case c == '"':
			s := d.data[start:j]
			if !ascii && !utf8.Valid(s) {
				return "", false
			}
			d.i = j + 1
			return d.text[start:j], true
		case c == '\\' || c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return "", false
}

func (d *fastDecoder) literal(lit string) bool {
	if len(d.data)-d.i < len(lit) || string(d.data[d.i:d.i+len(lit)]) != lit {
		return false
	}
	d.i += len(lit)
	return true
}

// number reads a number as JSON's grammar has it, and converts it as
// the fallback does: an integer literal that fits is an int64, any other
// number a float64; one out of range is left to the fallback.
func (d *fastDecoder) number() (any, bool) {
	start := d.i
	integer := true
	if d.data[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.data) && d.data[d.i] == '0':
		d.i++
	case d.i < len(d.data) && '1' <= d.data[d.i] && d.data[d.i] <= '9':
		d.digits()
	default:
		return nil, false
	}
	if d.i < len(d.data) && d.data[d.i] == '.' {
		d.i++
		integer = false
		if !d.digits() {
			return nil, false
		}
	}
	if d.i < len(d.data) && (d.data[d.i] == 'e' || d.data[d.i] == 'E') {
		d.i++
		integer = false
		if d.i < len(d.data) && (d.data[d.i] == '+' || d.data[d.i] == '-') {
			d.i++
		}
		if !d.digits() {
			return nil, false
		}
	}
	if integer {
		if n, err := strconv.ParseInt(string(d.data[start:d.i]), 10, 64); err == nil {
			return n, true
		}
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.i]), 64)
	if err != nil {
		return nil, false
	}
	return f, true
}

// digits reads one or more decimal digits.
func (d *fastDecoder) digits() bool {
	start := d.i
	for d.i < len(d.data) && '0' <= d.data[d.i] && d.data[d.i] <= '9' {
		d.i++
	}
	return d.i > start
}
