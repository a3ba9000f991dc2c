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
