package pkicmd

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
)

// The service account token signing key: `meridian pki sa-key` makes it
// when missing, `meridian pki rotate-sa-key` replaces it and keeps the old
// public keys for verification.

func runSAKey(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("sa-key", "Creates the service account token signing key in --dir/pki/sa.key (kept when present) and its\n"+
		"public key in --dir/pki/sa.pub.", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	return ensureSAKey(*dir, stdout)
}

// ensureSAKey creates the signing key when missing and reports it.
func ensureSAKey(dir string, stdout io.Writer) error {
	if err := os.MkdirAll(filepath.Join(dir, pkiplan.CertDir), 0o700); err != nil {
		return fmt.Errorf("sa-key: %w", err)
	}
	key, pub := pkiplan.ServiceAccountKeyFile(dir), pkiplan.ServiceAccountPublicKeysFile(dir)
	created, err := pki.LoadOrCreateSigningKey(key, pub)
	if err != nil {
		return err
	}
	verb := "kept"
	if created {
		verb = "created"
	}
	reportSAKey(stdout, verb, key, pub)
	return nil
}

func runRotateSAKey(args []string, stdout, stderr io.Writer) error {
	fs, dir := newFlags("rotate-sa-key", "Replaces the service account token signing key --dir/pki/sa.key with a new one and puts its public\n"+
		"key first in --dir/pki/sa.pub, keeping the old public keys there: tokens signed before verify until they\n"+
		"expire. Gateways read both files again within 5s. Remove an old key from sa.pub once every token it\n"+
		"signed has expired (--service-account-max-token-expiration after the rotation).", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	key, pub := pkiplan.ServiceAccountKeyFile(*dir), pkiplan.ServiceAccountPublicKeysFile(*dir)
	if err := pki.RotateSigningKey(key, pub); err != nil {
		return err
	}
	reportSAKey(stdout, "rotated", key, pub)
	return nil
}

func reportSAKey(w io.Writer, verb, key, pub string) {
	fmt.Fprintf(w, "service account signing key %s: %s\n", verb, key)
	fmt.Fprintf(w, "  apigateway --service-account-signing-key-file %s\n", key)
	fmt.Fprintf(w, "  apigateway --service-account-key-file %s\n", pub)
}
