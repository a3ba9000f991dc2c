package continuetoken

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestRoundTrip(t *testing.T) {
	tok, err := Encode(42, "/registry/configmaps/ns/b\x00", "/registry/configmaps/ns/")
	if err != nil {
		t.Fatal(err)
	}
	rev, start, err := Decode(tok, "/registry/configmaps/ns/")
	if err != nil || rev != 42 || start != "/registry/configmaps/ns/b\x00" {
		t.Fatalf("Decode = %d %q %v", rev, start, err)
	}
	if _, err := Encode(1, "/other/x", "/registry/"); err == nil {
		t.Error("a key outside the prefix was encoded")
	}
	for _, bad := range []string{"!!", "e30", "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MSwic3RhcnQiOiIuLi94In0"} {
		if _, _, err := Decode(bad, "/registry/"); !apierrors.IsBadRequest(err) {
			t.Errorf("Decode(%q): %v, want 400", bad, err)
		}
	}
}
