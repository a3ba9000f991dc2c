package apf

import "testing"

// TestServiceAccountMatches: a ServiceAccount subject matches exactly its
// account's user name, and with Name "*" any account of its namespace,
// nothing else.
func TestServiceAccountMatches(t *testing.T) {
	for _, tc := range []struct {
		sa   ServiceAccount
		user string
		want bool
	}{
		{ServiceAccount{"kube-system", "ctrl"}, "system:serviceaccount:kube-system:ctrl", true},
		{ServiceAccount{"kube-system", "ctrl"}, "system:serviceaccount:kube-system:ctrl2", false},
		{ServiceAccount{"kube-system", "ctrl"}, "system:serviceaccount:kube-system:ctr", false},
		{ServiceAccount{"kube-system", "ctrl"}, "system:serviceaccount:kube-systemx:ctrl", false},
		{ServiceAccount{"kube-system", "ctrl"}, "system:serviceaccount:kube-system", false},
		{ServiceAccount{"kube-system", "ctrl"}, "kube-system:ctrl", false},
		{ServiceAccount{"kube-system", "*"}, "system:serviceaccount:kube-system:x", true},
		{ServiceAccount{"kube-system", "*"}, "system:serviceaccount:kube-system:", false},
		{ServiceAccount{"kube-system", "*"}, "system:serviceaccount:kube-system:a:b", false},
		{ServiceAccount{"kube-system", "*"}, "system:serviceaccount:kube-sys:x", false},
		{ServiceAccount{"kube-system", "*"}, "system:serviceaccount:other:x", false},
		{ServiceAccount{"kube-system", "*"}, "alice", false},
		{ServiceAccount{"a:b", "c"}, "system:serviceaccount:a:b:c", true},
	} {
		if got := tc.sa.matches(tc.user); got != tc.want {
			t.Errorf("%+v matches %q = %v, want %v", tc.sa, tc.user, got, tc.want)
		}
		if tc.sa.Name != "*" {
			// The same as comparing with the account's user name.
			if want := tc.user == tc.sa.user(); tc.want != want {
				t.Errorf("%+v: table says %v for %q, user() says %v", tc.sa, tc.want, tc.user, want)
			}
		}
	}
}
