package discovery

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/buildinfo"
)

// TestGitCommit: /version's gitCommit carries what the linker stamped
// (hack/images.sh), and nothing for a development build.
func TestGitCommit(t *testing.T) {
	v, c := buildinfo.Version, buildinfo.Commit
	t.Cleanup(func() { buildinfo.Version, buildinfo.Commit = v, c })
	for _, tc := range []struct{ version, commit, want string }{
		{"dev", "", ""},
		{"dev", "abc123", "abc123"},
		{"v0.1.0-3-gabc123", "", "v0.1.0-3-gabc123"},
		{"v0.1.0", "abc123", "v0.1.0+abc123"},
	} {
		buildinfo.Version, buildinfo.Commit = tc.version, tc.commit
		if got := gitCommit(); got != tc.want {
			t.Errorf("version %q, commit %q: gitCommit %q, want %q", tc.version, tc.commit, got, tc.want)
		}
	}
}
