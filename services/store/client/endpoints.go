package client

import "strings"

// Endpoints splits a comma-separated list of members' gRPC addresses, the
// form a store address takes in the services' configurations, for Dial:
// spaces around each address and empty entries are dropped.
func Endpoints(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
