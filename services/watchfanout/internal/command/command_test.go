package command

import (
	"fmt"
	"io"
	"strings"
	"testing"

	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

func TestStoreFlagsRejected(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store-cert-file=c.crt"}, "--store-cert-file and --store-key-file"},
		{[]string{"--store-ca-file=/nonexistent/ca.crt"}, "store TLS"},
		{[]string{"--store-address=store"}, "StoreAddress"},
		{[]string{"--tls-cert-file=x"}, "--tls-key-file"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--watcher-buffer=-1"}, "WatcherBuffer"},
		{[]string{"--history-max-events=-5"}, "HistoryMaxEvents"},
	} {
		// Free addresses: a refusal found while building comes after
		// listening.
		args := append([]string{"--listen=127.0.0.1:0", "--metrics-listen=127.0.0.1:0"}, tc.args...)
		err := Run(t.Context(), args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// TestStoreAddressDefaultsToTheStoreListenAddress: with no flags, a
// replica dials the address a store member listens on with no flags
// (store --listen, whose default is storeclient.DefaultAddress), as the
// usage shows it.
func TestStoreAddressDefaultsToTheStoreListenAddress(t *testing.T) {
	var usage strings.Builder
	if err := Run(t.Context(), []string{"--help"}, &usage); err != nil {
		t.Fatalf("--help: %v", err)
	}
	_, entry, ok := strings.Cut(usage.String(), "-store-address string\n")
	if !ok {
		t.Fatalf("--help does not list --store-address:\n%s", usage.String())
	}
	entry, _, _ = strings.Cut(entry, "\n  -")
	if want := fmt.Sprintf("(default %q)", storeclient.DefaultAddress); !strings.Contains(entry, want) {
		t.Fatalf("--store-address: %s; want %s, where the store listens by default", strings.TrimSpace(entry), want)
	}
}
