package negotiation

import "testing"

func TestNegotiate(t *testing.T) {
	opts := Options{Types: []string{JSON, YAML, Protobuf}}
	cases := []struct {
		accept string
		want   string
		ok     bool
	}{
		{"", JSON, true},
		{"*/*", JSON, true},
		{"application/yaml", YAML, true},
		{"application/vnd.kubernetes.protobuf, */*", Protobuf, true},
		{"application/vnd.kubernetes.protobuf;stream=watch", Protobuf, true},
		// kubectl get: tables first, JSON as the fallback.
		{"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", JSON, true},
		{"application/json;q=0.5, application/yaml", YAML, true},
		{"application/*", JSON, true},
		{"text/html", "", false},
		{"application/json;as=Table;v=v1;g=meta.k8s.io", "", false},
		{"application/json;q=0", "", false},
	}
	for _, c := range cases {
		got, ok := Negotiate(c.accept, opts)
		if ok != c.ok || got.Type != c.want {
			t.Errorf("Negotiate(%q) = %q, %v; want %q, %v", c.accept, got.Type, ok, c.want, c.ok)
		}
	}
}

// TestNegotiateBareAgreesWithParsing: every header negotiateBare answers
// gets the media type the parsing negotiation picks, with no parameters,
// for every set of options (one refusing ranges without parameters
// included); the headers it must leave to parsing it leaves.
func TestNegotiateBareAgreesWithParsing(t *testing.T) {
	tablesOnly := Options{Types: []string{JSON}, AcceptParams: func(_ string, p map[string]string) bool { return p["as"] == "Table" }}
	headers := []struct {
		accept string
		bare   bool
	}{
		{"application/json", true},
		{" application/yaml ", true},
		{"application/vnd.kubernetes.protobuf, */*", true},
		{"application/json,*/*", true},
		{"application/json, */*;q=2", false},
		{"application/json, application/yaml", false},
		{"Application/JSON", false},
		{"application/json;charset=utf-8", false},
		{"application/json;q=0", false},
		{"*/*", false},
		{"text/plain", false},
	}
	for name, opts := range map[string]Options{"reads": Reads, "watches": Watches, "writes": Writes, "tables only": tablesOnly} {
		for _, h := range headers {
			got, ok := negotiateBare(h.accept, opts)
			want, wantOK := negotiate(h.accept, opts)
			if ok && (!wantOK || got.Type != want.Type || len(got.Params) != 0 || len(want.Params) != 0) {
				t.Errorf("%s: %q: negotiateBare picked %+v, parsing %+v (%v)", name, h.accept, got, want, wantOK)
			}
			if !h.bare && ok {
				t.Errorf("%s: %q: negotiateBare answered a header it must leave to parsing", name, h.accept)
			}
			if h.bare && wantOK && !ok {
				t.Errorf("%s: %q: negotiateBare left %q to parsing", name, h.accept, want.Type)
			}
			if mt, ok := Negotiate(h.accept, opts); ok != wantOK || mt.Type != want.Type {
				t.Errorf("%s: %q: Negotiate = %+v, %v; parsing %+v, %v", name, h.accept, mt, ok, want, wantOK)
			}
		}
	}
}
