package audit

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOptions: kube-apiserver's flags, their checks, and no auditor
// without a policy.
func TestOptions(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(everythingAtRequestResponse), 0o600); err != nil {
		t.Fatal(err)
	}
	var o Options
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--audit-policy-file", policy, "--audit-log-path", filepath.Join(dir, "audit.log"),
		"--audit-log-maxage", "3", "--audit-log-maxbackup", "2", "--audit-log-maxsize", "10", "--audit-log-format", "json",
		"--audit-webhook-batch-max-size", "5", "--audit-webhook-batch-max-wait", "2s", "--audit-webhook-mode", "batch"}); err != nil {
		t.Fatal(err)
	}
	if o.Log.MaxAge != 3 || o.Log.MaxBackups != 2 || o.Log.MaxSize != 10 || o.Webhook.BatchMaxSize != 5 || o.Webhook.BatchMaxWait != 2*time.Second {
		t.Errorf("flags: %+v", o)
	}
	a, err := New(o, nil, nil, nil)
	if err != nil || a == nil {
		t.Fatalf("New: %v, %v", a, err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	none, err := New(Options{Log: LogOptions{Path: filepath.Join(dir, "x.log")}}, nil, nil, nil)
	if err != nil || none != nil {
		t.Errorf("no policy: %v, %v; want no auditor", none, err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{PolicyFile: policy}, "needs a backend"},
		{Options{PolicyFile: policy, Log: LogOptions{Path: "-"}, LogFormat: "legacy"}, "only json"},
		{Options{PolicyFile: policy, Log: LogOptions{Path: "-"}, WebhookMode: "blocking"}, "only batch"},
		{Options{PolicyFile: policy, Log: LogOptions{Path: "-", MaxSize: -1}}, "negative"},
		{Options{PolicyFile: filepath.Join(dir, "missing.yaml"), Log: LogOptions{Path: "-"}}, "no such file"},
	} {
		if _, err := New(c.o, nil, nil, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
}
