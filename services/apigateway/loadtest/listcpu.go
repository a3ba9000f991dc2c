package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/procstat"
	"golang.org/x/net/http2"
)

// listVariant is one way of listing the collection that listCPU measures.
type listVariant struct {
	name string
	list func(c *http.Client, base string) (int, error)
}

// listVariants are the LISTs listCPU measures: whole (a consistent list),
// in chunks of 500 (following continue tokens) and resourceVersion=0, in
// JSON and in protobuf.
func listVariants() []listVariant {
	const pb = "application/vnd.kubernetes.protobuf"
	var out []listVariant
	for _, enc := range []struct{ name, accept string }{{"json", "application/json"}, {"protobuf", pb}} {
		accept := enc.accept
		out = append(out,
			listVariant{"whole " + enc.name, func(c *http.Client, base string) (int, error) { return get(c, base, accept) }},
			listVariant{"chunked " + enc.name, func(c *http.Client, base string) (int, error) { return chunked(c, base, accept) }},
			listVariant{"rv=0 " + enc.name, func(c *http.Client, base string) (int, error) { return get(c, base+"?resourceVersion=0", accept) }},
		)
	}
	return out
}

// runListCPU measures the server CPU time per LIST of n ConfigMaps of 1
// KiB (seeded in namespace loadtest of each target) in every listVariant,
// as the data dir's admin, one client at a time, on the gateways of spec
// (name=api-addr@pid,...): rounds of slices of d per variant and target,
// the targets' order alternating from round to round, so that gateways
// built from two commits are compared in one run. The CPU is the whole
// server process's, read from /proc before and after each slice. With
// only non-empty, just the variants whose name contains it are measured.
func runListCPU(tlsConf *tls.Config, spec, only string, n int, d time.Duration, rounds int) error {
	targets, err := parseCPUTargets(spec)
	if err != nil {
		return err
	}
	const ns = "loadtest"
	clients := map[string]*http.Client{}
	for _, t := range targets {
		c := &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
		clients[t.name] = c
		if err := seed(context.Background(), c, "https://"+t.addr, nil, ns, n); err != nil {
			return fmt.Errorf("%s: seeding: %w", t.name, err)
		}
	}
	variants := listVariants()
	for i := range variants {
		if !strings.Contains(variants[i].name, only) {
			variants[i].list = nil
		}
	}
	// One unmeasured list of each variant per target first: the caches
	// (watchfanout's memoized encodings) are filled as in steady state.
	for _, t := range targets {
		for _, v := range variants {
			if v.list == nil {
				continue
			}
			if _, err := v.list(clients[t.name], "https://"+t.addr+"/api/v1/namespaces/"+ns+"/configmaps"); err != nil {
				return fmt.Errorf("%s %s: %w", t.name, v.name, err)
			}
		}
	}
	fmt.Printf("%-10s %-18s %6s %8s %10s %14s\n", "target", "list", "round", "lists", "p50", "CPU ms/list")
	perList := map[string][]float64{}
	for round := range rounds {
		order := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, v := range variants {
			if v.list == nil {
				continue
			}
			for _, t := range order {
				c, base := clients[t.name], "https://"+t.addr+"/api/v1/namespaces/"+ns+"/configmaps"
				before, err := procstat.CPU(t.pid)
				if err != nil {
					return err
				}
				r := measure(d, 1, func() (int, error) { return v.list(c, base) })
				after, err := procstat.CPU(t.pid)
				if err != nil {
					return err
				}
				if r.err != nil {
					return fmt.Errorf("%s %s: %w", t.name, v.name, r.err)
				}
				if r.ops == 0 {
					continue
				}
				ms := float64((after - before).Microseconds()) / 1000 / float64(r.ops)
				perList[t.name+" "+v.name] = append(perList[t.name+" "+v.name], ms)
				fmt.Printf("%-10s %-18s %6d %8d %10s %14.1f\n", t.name, v.name, round, r.ops, r.p50().Round(time.Millisecond), ms)
			}
		}
	}
	for _, t := range targets {
		var json, pb float64
		for i, v := range variants {
			s := slices.Sorted(slices.Values(perList[t.name+" "+v.name]))
			if len(s) == 0 {
				continue
			}
			med := s[len(s)/2]
			if i < 3 {
				json += med / 3
			} else {
				pb += med / 3
			}
			fmt.Printf("%-10s median CPU per LIST %-18s %8.1f ms (rounds: min %.1f, max %.1f)\n", t.name, v.name, med, s[0], s[len(s)-1])
		}
		rss, _ := procstat.RSS(t.pid)
		if only != "" {
			// Some variants were not measured: no average of the three.
			fmt.Printf("%-10s RSS after %d MiB\n", t.name, rss>>20)
			continue
		}
		fmt.Printf("%-10s average of whole/chunked/rv=0: json %.1f ms, protobuf %.1f ms; RSS after %d MiB\n", t.name, json, pb, rss>>20)
	}
	return nil
}
