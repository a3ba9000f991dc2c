package pki

import "crypto/x509"

func x509VerifyOptions(ca *CA, name string) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: ca.Pool(), DNSName: name, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}
