package audit

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Options are kube-apiserver's audit flags.
type Options struct {
	// PolicyFile is the audit.k8s.io/v1 Policy; empty: no auditing.
	PolicyFile string
	// Log configures the log backend; an empty Path: none.
	Log LogOptions
	// LogFormat is "json" (the only format: one Event per line).
	LogFormat string
	// Webhook configures the webhook backend; an empty ConfigFile: none.
	Webhook WebhookOptions
	// WebhookMode is "batch" (the only mode).
	WebhookMode string
}

// AddFlags defines kube-apiserver's audit flags on fs, storing them in o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.PolicyFile, "audit-policy-file", "", "audit.k8s.io/v1 Policy file: which requests are audited at which level; empty: no auditing")
	fs.StringVar(&o.Log.Path, "audit-log-path", "", "write audit events to this file as JSON lines; - is standard output; empty: no log backend")
	fs.IntVar(&o.Log.MaxAge, "audit-log-maxage", 0, "days to keep rotated audit log files (0: no limit)")
	fs.IntVar(&o.Log.MaxBackups, "audit-log-maxbackup", 0, "rotated audit log files to keep (0: no limit)")
	fs.IntVar(&o.Log.MaxSize, "audit-log-maxsize", 0, "megabytes at which the audit log is rotated (0 with maxage and maxbackup 0: never rotated)")
	fs.StringVar(&o.LogFormat, "audit-log-format", "json", "format of the audit log: json (one audit.k8s.io/v1 Event per line)")
	fs.StringVar(&o.Webhook.ConfigFile, "audit-webhook-config-file", "", "kubeconfig naming the audit webhook's server and the credentials to present; empty: no webhook backend")
	fs.StringVar(&o.WebhookMode, "audit-webhook-mode", "batch", "how events reach the webhook: batch (buffered, POSTed as EventLists by one sender; a full buffer drops events, never blocks requests)")
	fs.IntVar(&o.Webhook.BatchMaxSize, "audit-webhook-batch-max-size", DefaultBatchMaxSize, "most events in one webhook POST")
	fs.DurationVar(&o.Webhook.BatchMaxWait, "audit-webhook-batch-max-wait", DefaultBatchMaxWait, "longest an event waits for its batch to fill before the batch is sent")
}

// Validate reports every problem with o.
func (o *Options) Validate() error {
	var errs []error
	if o.LogFormat != "" && o.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("--audit-log-format %q: only json is supported", o.LogFormat))
	}
	if o.WebhookMode != "" && o.WebhookMode != "batch" {
		errs = append(errs, fmt.Errorf("--audit-webhook-mode %q: only batch is supported", o.WebhookMode))
	}
	if o.Log.MaxAge < 0 || o.Log.MaxBackups < 0 || o.Log.MaxSize < 0 {
		errs = append(errs, errors.New("--audit-log-maxage, --audit-log-maxbackup and --audit-log-maxsize must not be negative"))
	}
	if o.Webhook.BatchMaxSize < 0 || o.Webhook.BatchMaxWait < 0 {
		errs = append(errs, errors.New("--audit-webhook-batch-max-size and --audit-webhook-batch-max-wait must not be negative"))
	}
	if o.PolicyFile != "" && o.Log.Path == "" && o.Webhook.ConfigFile == "" {
		errs = append(errs, errors.New("--audit-policy-file needs a backend: --audit-log-path and/or --audit-webhook-config-file"))
	}
	return errors.Join(errs...)
}

// New builds the auditor o configures: nil (no auditing) without a policy
// file. convert records protobuf bodies (see NewAuditor). Close the
// auditor to flush and close its backends.
func New(o Options, convert Converter, log *slog.Logger, reg prometheus.Registerer) (*Auditor, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	if o.PolicyFile == "" {
		if o.Log.Path != "" || o.Webhook.ConfigFile != "" {
			log.Warn("audit backends configured without --audit-policy-file: nothing is audited")
		}
		return nil, nil
	}
	policy, err := LoadPolicy(o.PolicyFile)
	if err != nil {
		return nil, err
	}
	var sinks []Sink
	if o.Log.Path != "" {
		s, err := NewLogSink(o.Log)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, s)
	}
	if o.Webhook.ConfigFile != "" {
		s, err := NewWebhookSink(o.Webhook)
		if err != nil {
			for _, s := range sinks {
				_ = s.Close()
			}
			return nil, err
		}
		sinks = append(sinks, s)
	}
	a, err := NewAuditor(policy, convert, log, reg, sinks...)
	if err != nil {
		for _, s := range sinks {
			_ = s.Close()
		}
		return nil, err
	}
	log.Info("auditing", "policy", o.PolicyFile, "log", o.Log.Path, "webhook", o.Webhook.ConfigFile)
	return a, nil
}
