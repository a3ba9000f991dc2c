package command

import (
	"io"
	"strings"
	"testing"
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
		err := Run(t.Context(), tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}
