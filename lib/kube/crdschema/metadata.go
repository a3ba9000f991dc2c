package crdschema

import (
	"time"
	"unicode/utf8"
)

// Upstream's decoder round-trips a custom resource's metadata through
// metav1.ObjectMeta (a JSON encoding and a strict decoding, then a
// conversion back to a map): unknown fields are dropped and reported,
// mistyped ones fail the request, and values are normalized (empty ones
// dropped, times in UTC at second precision). Most metadata is already in
// that normal form: what the client sends (name, labels, annotations)
// and what the server adds before admission (uid, creationTimestamp,
// managedFields) are strings, string maps and entries it encoded itself.
// canonicalMetadata recognizes that form, for which the round trip is the
// identity, so that prune can skip it; everything else takes the round
// trip.

// canonicalMetadata reports whether metadata is a map whose round trip
// through metav1.ObjectMeta would return an equal map and report no
// unknown field. It only says yes for a subset of the fields (the others
// take the round trip), and it is exact for that subset: every value is of
// the type ObjectMeta's field decodes from and encodes back to, non-empty
// (the field's omitempty would drop it), valid UTF-8 (encoding would
// replace invalid bytes), and a time is in the RFC 3339 form, in UTC and
// without fractions, that metav1.Time encodes.
func canonicalMetadata(metadata any) bool {
	m, ok := metadata.(map[string]any)
	if !ok {
		return false
	}
	for k, v := range m {
		var ok bool
		switch k {
		case "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion":
			ok = nonEmptyString(v)
		case "generation":
			n, isInt := v.(int64)
			ok = isInt && n != 0
		case "creationTimestamp":
			ok = canonicalTime(v)
		case "labels", "annotations":
			ok = nonEmptyStringMap(v)
		case "managedFields":
			ok = canonicalManagedFields(v)
		}
		if !ok {
			return false
		}
	}
	return true
}

// nonEmptyString reports whether v is a non-empty string of valid UTF-8.
func nonEmptyString(v any) bool {
	s, ok := v.(string)
	return ok && s != "" && utf8.ValidString(s)
}

// nonEmptyStringMap reports whether v is a non-empty map of strings, keys
// and values valid UTF-8 (the values may be empty: a map[string]string
// keeps them).
func nonEmptyStringMap(v any) bool {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return false
	}
	for k, x := range m {
		s, ok := x.(string)
		if !ok || !utf8.ValidString(k) || !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

// canonicalTime reports whether v is a time as metav1.Time encodes it: a
// non-zero instant in RFC 3339, UTC, whole seconds.
func canonicalTime(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	t, err := time.Parse(time.RFC3339, s)
	return err == nil && !t.IsZero() && t.UTC().Format(time.RFC3339) == s
}

// canonicalManagedFields reports whether v is a non-empty list of
// managedFields entries that each round-trip through
// metav1.ManagedFieldsEntry unchanged: the entries the field manager
// encodes.
func canonicalManagedFields(v any) bool {
	entries, ok := v.([]any)
	if !ok || len(entries) == 0 {
		return false
	}
	for _, e := range entries {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		for k, x := range m {
			var ok bool
			switch k {
			case "manager", "operation", "apiVersion", "fieldsType", "subresource":
				ok = nonEmptyString(x)
			case "time":
				ok = canonicalTime(x)
			case "fieldsV1":
				ok = fieldSetTree(x)
			}
			if !ok {
				return false
			}
		}
	}
	return true
}

// fieldSetTree reports whether v is a fieldsV1 value as the field manager
// encodes it: nested maps with valid UTF-8 keys and nothing else, which
// metav1.FieldsV1 keeps as its JSON and converts back to the same maps.
func fieldSetTree(v any) bool {
	m, ok := v.(map[string]any)
	if !ok {
		return false
	}
	for k, x := range m {
		if !utf8.ValidString(k) || !fieldSetTree(x) {
			return false
		}
	}
	return true
}
