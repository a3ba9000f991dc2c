package daemon

import (
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/ports"
)

// StoreFlags are the flags of a service that reads the store:
// --store-address, --store-ca-file, --store-cert-file, --store-key-file.
type StoreFlags struct {
	// Address is the comma-separated addresses of the store's members.
	Address string
	// Local is the comma-separated addresses of the members near this
	// process (RegisterLocal): serializable reads and watches go to them.
	Local                     string
	caFile, certFile, keyFile string
}

// LocalUsage is the usage of a --store-local-address flag.
const LocalUsage = "comma-separated gRPC addresses of the store members in this replica's region or zone (a subset of --store-address, or added to it): serializable reads (resourceVersion=0, NotOlderThan) and watches go to them, writes and consistent reads to the leader; empty: reads spread over every member, watches at the leader"

// RegisterLocal defines --store-local-address on fs, for a service whose
// store client prefers nearby members (storeclient.Options.Local).
func (s *StoreFlags) RegisterLocal(fs *flag.FlagSet) {
	fs.StringVar(&s.Local, "store-local-address", "", LocalUsage)
}

// Register defines the flags on fs; org is the organization (O=) the
// client certificate must carry for the store to let it read and watch.
func (s *StoreFlags) Register(fs *flag.FlagSet, org string) {
	fs.StringVar(&s.Address, "store-address", ports.Store, "comma-separated gRPC addresses of the store's members (host:port, or a gRPC target URI): give every member, so that reads and watches move to another member when one goes away")
	fs.StringVar(&s.caFile, "store-ca-file", "", "CA bundle (PEM) to verify the store's serving certificate")
	fs.StringVar(&s.certFile, "store-cert-file", "", "client certificate (PEM) for mTLS to the store, with O="+org+" (the store lets that identity read and watch), read again within 5s when it or the key changes")
	fs.StringVar(&s.keyFile, "store-key-file", "", "client certificate's private key (PEM)")
}

// TLS loads the store client TLS configuration; nil (plaintext) when no
// file is set. The client certificate is read again when it changes, and
// log logs those reloads.
func (s *StoreFlags) TLS(log *slog.Logger) (*tls.Config, error) {
	if s.caFile == "" && s.certFile == "" && s.keyFile == "" {
		return nil, nil
	}
	if (s.certFile == "") != (s.keyFile == "") {
		return nil, errors.New("--store-cert-file and --store-key-file must be set together")
	}
	c, err := pki.LoadClientTLS(s.certFile, s.keyFile, s.caFile, "", log)
	if err != nil {
		return nil, fmt.Errorf("store TLS: %w", err)
	}
	return c, nil
}
