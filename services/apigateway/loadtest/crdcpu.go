package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/procstat"
	"golang.org/x/net/http2"
)

// crdFields is the number of string fields of the measured custom
// resource's schema, and of data keys of the ConfigMap beside it.
const crdFields = 20

// benchCRD is a namespaced CRD of crdFields string fields under spec and
// three x-kubernetes-validations rules.
func benchCRD() string {
	var props []string
	for i := range crdFields {
		props = append(props, fmt.Sprintf(`"f%02d":{"type":"string","maxLength":128}`, i))
	}
	return `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"benches.loadtest.meridian.io"},
"spec":{"group":"loadtest.meridian.io","scope":"Namespaced","names":{"plural":"benches","singular":"bench","kind":"Bench"},
"versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object",
"properties":{` + strings.Join(props, ",") + `},
"x-kubernetes-validations":[{"rule":"self.f00.size() <= 64"},{"rule":"self.f01 != 'forbidden'"},{"rule":"!has(self.f02) || self.f02.startsWith('v')"}]}}}}}]}}`
}

// benchValue is every field's (and data key's) value: 40 bytes.
var benchValue = "v" + strings.Repeat("x", 39)

// benchObjects returns the bodies of a custom resource and a ConfigMap
// named name holding the same crdFields values.
func benchObjects(name string) (cr, cm string) {
	var kv []string
	for i := range crdFields {
		kv = append(kv, fmt.Sprintf(`"f%02d":%q`, i, benchValue))
	}
	fields := strings.Join(kv, ",")
	return fmt.Sprintf(`{"apiVersion":"loadtest.meridian.io/v1","kind":"Bench","metadata":{"name":%q},"spec":{%s}}`, name, fields),
		fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q},"data":{%s}}`, name, fields)
}

// runCRDCPU measures, as the data dir's admin on the gateway at
// addr@pid, the server CPU per create, per GET and per LIST of n objects
// of a custom resource (benchCRD) and of a ConfigMap of the same size,
// the two kinds measured back to back in each round (in alternating
// order), and reports per kind the median over rounds and per operation
// the median of the rounds' CR/ConfigMap ratios; opNames chooses among
// "create", "GET" and "LIST".
func runCRDCPU(dataDir, spec string, n int, d time.Duration, levels string, rounds int, opNames []string) error {
	addr, pidText, ok := strings.Cut(spec, "@")
	var pid int
	if _, err := fmt.Sscan(pidText, &pid); !ok || err != nil {
		return fmt.Errorf("--crd-cpu %q: want api-addr@pid", spec)
	}
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	for _, cc := range concurrencies(levels) {
		if err := crdCPU(tlsConf, "https://"+addr, pid, n, d, cc, rounds, opNames); err != nil {
			return err
		}
	}
	return nil
}

// crdKind is one of the two measured kinds: its collection's path in a
// namespace and its body.
type crdKind struct {
	name       string
	collection func(ns string) string
	body       func(name string) string
}

func crdCPU(tlsConf *tls.Config, api string, pid, n int, d time.Duration, cc, rounds int, opNames []string) error {
	admin := &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	post := func(path, body string) error {
		_, err := send(admin, http.MethodPost, api+path, "application/json", []byte(body), http.StatusCreated)
		if err != nil && strings.Contains(err.Error(), "409") {
			return nil
		}
		return err
	}
	kinds := []crdKind{
		{"ConfigMap", func(ns string) string { return "/api/v1/namespaces/" + ns + "/configmaps" },
			func(name string) string { _, cm := benchObjects(name); return cm }},
		{"CR", func(ns string) string { return "/apis/loadtest.meridian.io/v1/namespaces/" + ns + "/benches" },
			func(name string) string { cr, _ := benchObjects(name); return cr }},
	}
	const listNS, writeNS = "crdcpu-list", "crdcpu-write"
	for _, ns := range []string{listNS, writeNS} {
		if err := post("/api/v1/namespaces", fmt.Sprintf(`{"metadata":{"name":%q}}`, ns)); err != nil {
			return err
		}
	}
	if err := post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", benchCRD()); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if code, err := getCode(admin, api+kinds[1].collection(listNS)+"?limit=1"); err == nil && code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the CRD is not served after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// n objects of each kind to list (kept from an earlier run).
	for _, k := range kinds {
		var next atomic.Int64
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= int64(n); i = next.Add(1) {
					if err := post(k.collection(listNS), k.body(fmt.Sprintf("obj-%05d", i))); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
				}
			}()
		}
		wg.Wait()
		if firstErr != nil {
			return fmt.Errorf("seeding %s: %w", k.name, firstErr)
		}
	}
	run := time.Now().UnixNano()
	var created atomic.Int64
	ops := map[string]func(k crdKind) func() (int, error){
		"create": func(k crdKind) func() (int, error) {
			return func() (int, error) {
				return send(admin, http.MethodPost, api+k.collection(writeNS), "application/json", []byte(k.body(fmt.Sprintf("w-%d-%d", run, created.Add(1)))), http.StatusCreated)
			}
		},
		"GET": func(k crdKind) func() (int, error) {
			return func() (int, error) { return get(admin, api+k.collection(listNS)+"/obj-00001", "application/json") }
		},
		"LIST": func(k crdKind) func() (int, error) {
			return func() (int, error) { return get(admin, api+k.collection(listNS), "application/json") }
		},
	}
	for _, op := range opNames {
		if ops[op] == nil {
			return fmt.Errorf("--crd-cpu-ops: unknown operation %q (create, GET, LIST)", op)
		}
	}
	for _, k := range kinds {
		for _, op := range opNames {
			if r := measure(time.Second, cc, ops[op](k)); r.err != nil {
				return fmt.Errorf("%s %s: %w", k.name, op, r.err)
			}
		}
	}
	fmt.Printf("%-10s %-7s %6s %6s %10s %10s %14s\n", "kind", "op", "round", "conc", "ops/s", "p50", "CPU µs/op")
	perOp := map[string][]float64{}
	// pairRatios[op] holds, per round, the CR's CPU per op over the
	// ConfigMap's measured next to it: a pair shares the machine's state
	// far more than rounds apart do, so its median is the robust ratio.
	pairRatios := map[string][]float64{}
	for round := range rounds {
		order := slices.Clone(kinds)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, op := range opNames {
			for _, k := range order {
				before, err := procstat.CPU(pid)
				if err != nil {
					return err
				}
				r := measure(d, cc, ops[op](k))
				after, err := procstat.CPU(pid)
				if err != nil {
					return err
				}
				if r.err != nil {
					return fmt.Errorf("%s %s: %w", k.name, op, r.err)
				}
				us := float64((after - before).Microseconds()) / float64(r.ops)
				perOp[k.name+" "+op] = append(perOp[k.name+" "+op], us)
				fmt.Printf("%-10s %-7s %6d %6d %10.1f %10s %14.0f\n", k.name, op, round, cc, float64(r.ops)/r.took.Seconds(), r.p50().Round(time.Microsecond), us)
			}
			cm, cr := perOp[kinds[0].name+" "+op], perOp[kinds[1].name+" "+op]
			if last := len(cm) - 1; cm[last] > 0 {
				pairRatios[op] = append(pairRatios[op], cr[last]/cm[last])
			}
		}
	}
	rss, _ := procstat.RSS(pid)
	for _, op := range opNames {
		var med [2]float64
		for i, k := range kinds {
			v := slices.Sorted(slices.Values(perOp[k.name+" "+op]))
			med[i] = v[len(v)/2]
			fmt.Printf("%-10s median CPU per %-6s %9.0f µs (rounds: min %.0f, max %.0f), concurrency %d\n", k.name, op, med[i], v[0], v[len(v)-1], cc)
		}
		fmt.Printf("CR/ConfigMap per %-6s %.2fx\n", op, med[1]/med[0])
		if v := slices.Sorted(slices.Values(pairRatios[op])); len(v) > 0 {
			fmt.Printf("CR/ConfigMap per %-6s median of %d per-round pairs %.2fx (min %.2f, max %.2f), concurrency %d\n", op, len(v), median(v), v[0], v[len(v)-1], cc)
		}
	}
	fmt.Printf("server RSS after the run: %d MiB\n", rss>>20)
	return nil
}

// median is the median of sorted values (the mean of the middle two of
// an even count).
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}
