package reconcile

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	"log/slog"
	"slices"
	"time"
)

// TestRequire checks that every missing field is named, in order, and
// that a complete Config passes.
func TestRequire(t *testing.T) {
	err := Require("ctl", Registry(nil), Codec(nil), Store(nil), Objects(nil), User(identity.User{}))
	want := "ctl: a Registry is required\nctl: a Codec is required\nctl: a Store is required\nctl: Objects are required\nctl: a User is required"
	if err == nil || err.Error() != want {
		t.Fatalf("Require = %v, want %q", err, want)
	}
	var store interface{ List() }
	if err := Require("ctl", Store(store), User(identity.User{Name: "u"}), Objects(struct{}{})); err == nil || err.Error() != "ctl: a Store is required" {
		t.Fatalf("Require with a nil interface Store = %v", err)
	}
	if err := Require("ctl", User(identity.User{Name: "u"}), Objects(struct{}{})); err != nil {
		t.Fatalf("Require of set fields = %v, want nil", err)
	}
}

// TestDefaults checks that unset fields get the defaults and set ones
// are kept.
func TestDefaults(t *testing.T) {
	if log, every := Defaults(nil, 0, time.Second); log != slog.Default() || every != time.Second {
		t.Errorf("Defaults(nil, 0) = %v, %v; want slog.Default(), 1s", log, every)
	}
	mine := slog.New(slog.DiscardHandler)
	if log, every := Defaults(mine, time.Minute, time.Second); log != mine || every != time.Minute {
		t.Errorf("Defaults(mine, 1m) = %v, %v; want mine, 1m", log, every)
	}
}

// TestServiceAccountUser checks the name and groups of a controller's
// ServiceAccount, as RBAC subjects of kind ServiceAccount match them.
func TestServiceAccountUser(t *testing.T) {
	u := ServiceAccountUser("x-controller")
	if u.Name != "system:serviceaccount:kube-system:x-controller" {
		t.Errorf("Name = %q", u.Name)
	}
	if want := []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}; !slices.Equal(u.Groups, want) {
		t.Errorf("Groups = %q, want %q", u.Groups, want)
	}
}
