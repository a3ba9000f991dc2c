package storagemigrate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"text/tabwriter"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

const summary = `Rewrites every stored object of the resources --encryption-provider-config
names whose value is not encrypted with its current key (the first key of
the first provider), so that the old keys can leave the configuration.
Run it after every gateway and watchfanout runs with the new
configuration. It talks to the store with the gateway's client
certificate (O=meridian:gateways).`

// Command runs `meridian storage-migrate` with args (after
// "storage-migrate"): the report goes to stdout, usage and logs to
// stderr. --help returns nil.
func Command(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("meridian storage-migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		endpoints = fs.String("endpoints", "", "comma-separated gRPC addresses of the store's members (required)")
		dataDir   = fs.String("data-dir", "", "an all-in-one's data directory: --cert, --key and --cacert default to its pki/apigateway-client.crt, .key and internal-ca.crt")
		cert      = fs.String("cert", "", "client certificate with O=meridian:gateways, signed by the internal CA")
		key       = fs.String("key", "", "the client certificate's key")
		cacert    = fs.String("cacert", "", "the internal CA, which signs the store's certificate")
		config    = fs.String("encryption-provider-config", "", "the EncryptionConfiguration the gateways run with (required)")
		resources = fs.String("resources", "", "comma-separated resources to migrate (secrets, leases.coordination.k8s.io, widgets.example.com); empty: every resource the configuration names, custom resources of the stored CRDs included")
		dryRun    = fs.Bool("dry-run", false, "count the objects to rewrite, write nothing")
	)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: meridian storage-migrate --endpoints <store> --encryption-provider-config <file> [flags]\n\n%s\n\nflags:\n", summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *dataDir != "" {
		pkiDir := filepath.Join(*dataDir, "pki")
		*cert = or(*cert, filepath.Join(pkiDir, "apigateway-client.crt"))
		*key = or(*key, filepath.Join(pkiDir, "apigateway-client.key"))
		*cacert = or(*cacert, filepath.Join(pkiDir, "internal-ca.crt"))
	}
	var problems []error
	if *endpoints == "" {
		problems = append(problems, errors.New("--endpoints is required"))
	}
	if *config == "" {
		problems = append(problems, errors.New("--encryption-provider-config is required"))
	}
	if *cert == "" || *key == "" || *cacert == "" {
		problems = append(problems, errors.New("--cert, --key and --cacert (or --data-dir) are required"))
	}
	if err := errors.Join(problems...); err != nil {
		return err
	}

	logger := slog.New(slog.NewTextHandler(stderr, nil))
	reg := registry.New(registry.Standard()...)
	crypt, err := storagecrypt.Load(ctx, *config, storagecrypt.Options{Registry: reg, Logger: logger})
	if err != nil {
		return err
	}
	defer crypt.Close()
	tlsConf, err := pki.LoadClientTLS(*cert, *key, *cacert, "", logger)
	if err != nil {
		return err
	}
	conn, err := storeclient.Dial(storeclient.Endpoints(*endpoints), tlsConf)
	if err != nil {
		return err
	}
	defer conn.Close()
	cdc, err := codec.New()
	if err != nil {
		return err
	}
	targets, err := Targets(ctx, conn.KV(), crypt, reg, cdc, *resources)
	if err != nil {
		return err
	}
	results, err := Run(ctx, Config{KV: conn.KV(), Transformer: crypt, Resources: targets, DryRun: *dryRun, Logger: logger})
	report(stdout, results, *dryRun)
	return err
}

// report prints one line per resource.
func report(w io.Writer, results []Result, dryRun bool) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	written := "REWRITTEN"
	if dryRun {
		written = "REWRITTEN (dry run)"
	}
	fmt.Fprintf(tw, "RESOURCE\tOBJECTS\tSTALE\t%s\tFAILED\n", written)
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", r.Resource, r.Objects, r.Stale, r.Rewritten, r.Failed)
	}
	_ = tw.Flush()
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
