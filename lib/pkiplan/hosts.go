package pkiplan

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Hosts are the names a serving certificate is valid for: its DNS and IP
// subject alternative names.
type Hosts struct {
	// DNSNames are DNS names, wildcards ("*.store.example") allowed.
	DNSNames []string
	// IPs are IP addresses.
	IPs []net.IP
}

// Loopback are the names of the local host: localhost, 127.0.0.1 and
// ::1.
func Loopback() Hosts {
	return Hosts{DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
}

// ParseHosts parses host names and IP addresses, each possibly a
// comma-separated list ("10.0.0.1,store-0.example"); blanks are skipped
// and duplicates dropped. It reports every name that is neither an IP
// address nor a DNS name.
func ParseHosts(list ...string) (Hosts, error) {
	var (
		h    Hosts
		errs []error
	)
	for _, item := range list {
		for _, s := range strings.Split(item, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if ip := net.ParseIP(s); ip != nil {
				h = h.Add(Hosts{IPs: []net.IP{ip}})
				continue
			}
			if len(validation.IsDNS1123Subdomain(s)) > 0 && len(validation.IsWildcardDNS1123Subdomain(s)) > 0 {
				errs = append(errs, fmt.Errorf("%w: host %q is neither an IP address nor a DNS name (lower case letters, digits, '-' and '.')", ErrInvalid, s))
				continue
			}
			h = h.Add(Hosts{DNSNames: []string{s}})
		}
	}
	return h, errors.Join(errs...)
}

// Add returns the union of h and o, h's names first.
func (h Hosts) Add(o Hosts) Hosts {
	out := Hosts{DNSNames: slices.Clone(h.DNSNames), IPs: slices.Clone(h.IPs)}
	for _, d := range o.DNSNames {
		if !slices.Contains(out.DNSNames, d) {
			out.DNSNames = append(out.DNSNames, d)
		}
	}
	for _, ip := range o.IPs {
		if !slices.ContainsFunc(out.IPs, ip.Equal) {
			out.IPs = append(out.IPs, ip)
		}
	}
	return out
}

// Empty reports whether h names no host.
func (h Hosts) Empty() bool { return len(h.DNSNames) == 0 && len(h.IPs) == 0 }

// String lists the hosts, comma-separated, DNS names first.
func (h Hosts) String() string {
	s := slices.Clone(h.DNSNames)
	for _, ip := range h.IPs {
		s = append(s, ip.String())
	}
	return strings.Join(s, ",")
}
