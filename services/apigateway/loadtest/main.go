// Command loadtest measures the gateway's read path against a running
// control plane, side by side with the same reads served by the store alone,
// so the gateway's own cost shows:
//
//	GET one object           vs store Range of one key
//	LIST N objects (JSON, protobuf; whole and in chunks of 500)
//	                         vs store Range of the prefix (whole, chunked)
//	watch start (headers + first event)
//
// each at several client concurrencies for a fixed duration. With
// --grpc-cpu it measures instead the server CPU time per Get over the gRPC
// API (or a Create or Get of a Secret, --grpc-cpu-op) of gateways built
// from different commits or run with different configurations, side by
// side (see grpcCPU); with --rest-cpu, the server CPU time per REST GET
// and create of gateways run side by side, say with and without RBAC, or
// one gateway called with a static and with a service account token
// (--rest-cpu-sa; see restCPU); with --path-cpu, the server CPU time per
// GET of non-resource paths, health and discovery (runPathCPU); with
// --watch-latency, watch delivery
// latency and CPU per delivered event (watchLatency); with --idle-watches,
// the server's RSS per idle watch (idleWatches); with --list-cpu, the
// server CPU per LIST of --objects ConfigMaps, whole, chunked and at
// resourceVersion=0, JSON and protobuf (see runListCPU); with --storm, a
// relist storm of concurrent LISTs and the server's peak RSS growth (see
// runStorm). Start meridian
// first (its ready log line names the store address), e.g.:
//
//	go run ./cmd/meridian --data-dir /tmp/bench &
//	go run ./services/apigateway/loadtest --data-dir /tmp/bench --api https://127.0.0.1:6443 --store <addr>
//
// The load runs as the data dir's admin (system:masters, whose requests
// flow control exempts: one Acquire, no Release) unless --token names a
// bearer token of meridian's --token-auth-file, whose user is queued and
// released like any other.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func main() {
	var (
		dataDir  = flag.String("data-dir", ".meridian", "meridian's data dir (for pki/)")
		api      = flag.String("api", "https://127.0.0.1:6443", "the gateway's HTTPS address")
		store    = flag.String("store", "", "the store's gRPC address (from meridian's ready line)")
		objects  = flag.Int("objects", 10000, "objects in the listed namespace")
		duration = flag.Duration("duration", 5*time.Second, "how long each measurement runs")
		levels   = flag.String("concurrency", "1,32", "client concurrencies")
		only     = flag.String("only", "reads,writes", "which measurements: reads, writes or both; with --rest-cpu: get (or reads), create (or writes) or both")
		token    = flag.String("token", "", "send this bearer token (a user of meridian's --token-auth-file) instead of acting as the admin")
		grpcCPU  = flag.String("grpc-cpu", "", "measure only the server CPU per gRPC API Get of these meridians, name=grpc-addr@pid,... (sharing --data-dir's certificates)")
		listOnly = flag.String("list-variants", "", "with --list-cpu: measure only the lists whose name contains this (e.g. chunked); empty: all")
		rounds   = flag.Int("rounds", 6, "with --grpc-cpu or --rest-cpu: slices of --duration per meridian, operation and concurrency")
		cpuOp    = flag.String("grpc-cpu-op", "configmap-get", "with --grpc-cpu: the operations measured, comma-separated: configmap-get, secret-get, secret-create (1 KiB objects)")
		restCPU  = flag.String("rest-cpu", "", "measure only the server CPU per REST GET and create, as --token's user, of these meridians, name=api-addr@pid,... (sharing --data-dir's certificates)")
		user     = flag.String("token-user", "loadtest", "with --rest-cpu: the user of --token, whom a Role lets get and create config maps")
		pathCPU  = flag.String("path-cpu", "", "measure only the server CPU per GET of --paths (non-resource requests), as --token's user or, without --token, anonymous, of these meridians, name=api-addr@pid,... (sharing --data-dir's certificates)")
		paths    = flag.String("paths", "/healthz,/livez,/readyz,/apis,/apis/apps/v1,/version", "with --path-cpu: the paths, comma-separated")
		restSA   = flag.String("rest-cpu-sa", "", "with --rest-cpu: comma-separated names of targets called with a service account token (requested for loadtest-rbac/loadtest) instead of --token")
		bindings = flag.String("rbac-bindings", "1000,100", "with --rest-cpu: RoleBindings and ClusterRoleBindings of other subjects to create first")
		watchLat = flag.Int("watch-latency", 0, "measure only watch delivery: this many JSON watches of one namespace (over --watch-conns HTTP/2 connections) while ConfigMaps are created there at --watch-rate per second for --duration")
		wConns   = flag.Int("watch-conns", 50, "with --watch-latency or --idle-watches: HTTP/2 connections the watches share")
		wRate    = flag.Int("watch-rate", 50, "with --watch-latency: creates per second")
		crdCPU   = flag.String("crd-cpu", "", "measure only the server CPU per create, GET and LIST of --objects of a custom resource (20 fields, 3 CEL rules) beside a ConfigMap of the same size, as the admin, on the gateway api-addr@pid")
		crdOps   = flag.String("crd-cpu-ops", "create,GET,LIST", "with --crd-cpu: the operations measured, comma-separated")
		memory   = flag.String("memory", "", "measure only the RSS of these meridians (name=api-addr@pid,..., sharing --data-dir's certificates, one after the other) before, during and after issue 24's loads: --objects creates, GETs and LISTs at 8 clients for --duration each, --watch-latency watches (default 500) over --watch-conns connections for --duration, then --idle without clients")
		idle     = flag.Duration("idle", 60*time.Second, "with --memory: how long to leave the server idle after the loads")
		memPprof = flag.String("memory-pprof", "", "with --memory: the targets' --pprof addresses, name=host:port,...; each one's heap profile is saved as NAME-idle.pb.gz in the working directory right after the RSS reading that ends the idle wait, to account for its caches at that moment")
		wPID     = flag.Int("watch-pid", 0, "with --watch-latency or --idle-watches: the server process, whose CPU per delivered event and RSS are reported")
		idleW    = flag.Int("idle-watches", 0, "measure only idle watches: open this many JSON watches of an empty namespace (over --watch-conns HTTP/2 connections) and report the server's RSS growth per watch (--watch-pid)")
		wPprof   = flag.String("watch-pprof", "", "with --idle-watches: the server's --pprof address (http://host:port), to collect garbage before each RSS reading and count goroutines")
		listCPU  = flag.String("list-cpu", "", "measure only the server CPU per LIST of --objects ConfigMaps (whole, chunks of 500, resourceVersion=0; JSON and protobuf), as the admin, of these meridians, name=api-addr@pid,... (sharing --data-dir's certificates)")
		storm    = flag.Int("storm", 0, "run only a relist storm: this many concurrent JSON LISTs of --objects ConfigMaps, as the admin, over --storm-conns HTTP/2 connections, against --storm-target")
		sConns   = flag.Int("storm-conns", 50, "with --storm: HTTP/2 connections the lists share")
		sTarget  = flag.String("storm-target", "", "with --storm: the gateway, api-addr@pid, whose RSS is sampled every 100 ms")
	)
	flag.Parse()
	var err error
	if *memory != "" {
		w := *watchLat
		if w == 0 {
			w = 500
		}
		err = runMemory(*dataDir, *memory, *memPprof, *objects, *duration, *idle, w, *wConns)
	} else if *listCPU != "" || *storm > 0 {
		err = runAdminLoad(*dataDir, func(tlsConf *tls.Config) error {
			if *storm > 0 {
				return runStorm(tlsConf, *sTarget, *objects, *storm, *sConns)
			}
			return runListCPU(tlsConf, *listCPU, *listOnly, *objects, *duration, *rounds)
		})
	} else if *idleW > 0 {
		err = runIdleWatches(*dataDir, *api, *idleW, *wConns, *wPID, *wPprof)
	} else if *watchLat > 0 {
		err = runWatchLatency(*dataDir, *api, *watchLat, *wConns, *wRate, *duration, *wPID)
	} else if *crdCPU != "" {
		err = runCRDCPU(*dataDir, *crdCPU, *objects, *duration, *levels, *rounds, strings.Split(*crdOps, ","))
	} else if *restCPU != "" {
		err = runRESTCPU(*dataDir, *token, *user, *restCPU, *restSA, *bindings, *duration, *levels, *rounds, restOps(*only))
	} else if *pathCPU != "" {
		err = runPathCPU(*dataDir, *token, *pathCPU, *paths, *duration, *levels, *rounds)
	} else if *grpcCPU != "" {
		err = runGRPCCPU(*dataDir, *token, *grpcCPU, *cpuOp, *duration, *levels, *rounds)
	} else {
		err = run(*dataDir, *api, *store, *token, *objects, *duration, *levels, *only)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// runAdminLoad runs load with the TLS configuration of the data dir's
// admin.
func runAdminLoad(dataDir string, load func(tlsConf *tls.Config) error) error {
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	return load(tlsConf)
}

func run(dataDir, api, storeAddr, token string, n int, d time.Duration, levels, only string) error {
	ctx := context.Background()
	// The API takes the admin's certificate; the store, another trust
	// domain, takes the gateway's (the identity that reads and writes
	// keys).
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	storeTLS, err := pki.LoadClientTLS(filepath.Join(pdir, "apigateway-client.crt"), filepath.Join(pdir, "apigateway-client.key"), filepath.Join(pdir, "internal-ca.crt"), "", nil)
	if err != nil {
		return err
	}
	var rt http.RoundTripper = &http2.Transport{TLSClientConfig: tlsConf}
	if token != "" {
		rt = bearer{token: token, next: rt}
	}
	httpc := &http.Client{Transport: rt}
	conn, err := grpc.NewClient(storeAddr, grpc.WithTransportCredentials(credentials.NewTLS(storeTLS)), grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)))
	if err != nil {
		return err
	}
	defer conn.Close()
	kv := storev1.NewKVServiceClient(conn)

	ns := "loadtest"
	if err := seed(ctx, httpc, api, kv, ns, n); err != nil {
		return err
	}
	cmRes := registry.New(registry.Core()...)
	res, _ := cmRes.Lookup(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	prefix := res.KeyPrefix(ns)
	base := api + "/api/v1/namespaces/" + ns + "/configmaps"

	conc := concurrencies(levels)
	fmt.Printf("%-44s %6s %10s %10s %10s %12s %10s\n", "operation", "conc", "ops/s", "p50", "p99", "bytes/op", "overhead")
	var writeID atomic.Int64
	for _, cc := range conc {
		if strings.Contains(only, "writes") {
			// Writes go to a namespace of their own: the objects they
			// create would otherwise grow the listed collection.
			writes(ctx, httpc, kv, api, ns+"-writes", d, cc, &writeID)
		}
		if !strings.Contains(only, "reads") {
			continue
		}
		report("gateway GET one (json)", cc, measure(d, cc, func() (int, error) { return get(httpc, base+"/cm-00000", "application/json") }))
		report("store   Range one key (linearizable)", cc, measure(d, cc, func() (int, error) {
			r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(prefix + "cm-00000")})
			return size(r), err
		}))
		report("store   Range one key (serializable)", cc, measure(d, cc, func() (int, error) {
			r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(prefix + "cm-00000"), Serializable: true})
			return size(r), err
		}))
		report(fmt.Sprintf("gateway LIST %d (json)", n), cc, measure(d, cc, func() (int, error) { return get(httpc, base, "application/json") }))
		report(fmt.Sprintf("gateway LIST %d (protobuf)", n), cc, measure(d, cc, func() (int, error) { return get(httpc, base, "application/vnd.kubernetes.protobuf") }))
		report(fmt.Sprintf("gateway LIST %d chunked 500 (json)", n), cc, measure(d, cc, func() (int, error) { return chunked(httpc, base, "application/json") }))
		report(fmt.Sprintf("gateway LIST %d chunked 500 (protobuf)", n), cc, measure(d, cc, func() (int, error) { return chunked(httpc, base, "application/vnd.kubernetes.protobuf") }))
		report(fmt.Sprintf("store   Range %d (prefix)", n), cc, measure(d, cc, func() (int, error) {
			r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + "0")})
			return size(r), err
		}))
		report(fmt.Sprintf("store   Range %d chunked 500", n), cc, measure(d, cc, func() (int, error) {
			total, start := 0, []byte(prefix)
			for {
				r, err := kv.Range(ctx, &storev1.RangeRequest{Key: start, RangeEnd: []byte(prefix[:len(prefix)-1] + "0"), Limit: 500, Revision: 0})
				if err != nil {
					return total, err
				}
				total += size(r)
				if !r.More {
					return total, nil
				}
				start = append(append([]byte(nil), r.Kvs[len(r.Kvs)-1].Key...), 0)
			}
		}))
		report("gateway watch start (one object)", cc, measure(d, cc, func() (int, error) { return watchStart(httpc, base) }))
	}
	return nil
}

// runGRPCCPU runs grpcCPU for each of ops at each concurrency of levels,
// as the data dir's admin or token's user.
func runGRPCCPU(dataDir, token, spec, ops string, d time.Duration, levels string, rounds int) error {
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	for _, op := range strings.Split(ops, ",") {
		for _, cc := range concurrencies(levels) {
			if err := grpcCPU(context.Background(), tlsConf, token, spec, op, d, cc, rounds); err != nil {
				return err
			}
		}
	}
	return nil
}

// runRESTCPU runs restCPU at each concurrency of levels, as token's
// user (or, on the targets named in saSpec, a service account's),
// preparing the targets as the data dir's admin.
func runRESTCPU(dataDir, token, user, spec, saSpec, bindings string, d time.Duration, levels string, rounds int, ops []string) error {
	saTargets := map[string]bool{}
	for _, n := range strings.Split(saSpec, ",") {
		if n = strings.TrimSpace(n); n != "" {
			saTargets[n] = true
		}
	}
	if token == "" {
		return fmt.Errorf("--rest-cpu needs --token: the admin, in system:masters, is never asked about")
	}
	var rb, crb int
	if _, err := fmt.Sscanf(bindings, "%d,%d", &rb, &crb); err != nil {
		return fmt.Errorf("--rbac-bindings %q: %w", bindings, err)
	}
	pdir := filepath.Join(dataDir, "pki")
	tlsConf, err := pki.LoadClientTLS(filepath.Join(pdir, "admin.crt"), filepath.Join(pdir, "admin.key"), filepath.Join(pdir, "api-ca.crt"), "127.0.0.1", nil)
	if err != nil {
		return err
	}
	for _, cc := range concurrencies(levels) {
		if err := restCPU(tlsConf, token, user, spec, saTargets, d, cc, rounds, rb, crb, ops); err != nil {
			return err
		}
	}
	return nil
}

// restOps is the operations --rest-cpu measures, from --only: "GET" for
// get or reads, "create" for create or writes.
func restOps(only string) []string {
	var ops []string
	if strings.Contains(only, "get") || strings.Contains(only, "reads") {
		ops = append(ops, "GET")
	}
	if strings.Contains(only, "create") || strings.Contains(only, "writes") {
		ops = append(ops, "create")
	}
	return ops
}

// concurrencies parses a comma-separated list of client concurrencies.
func concurrencies(levels string) []int {
	var conc []int
	for _, s := range strings.Split(levels, ",") {
		var v int
		fmt.Sscan(s, &v)
		conc = append(conc, v)
	}
	return conc
}

// bearer sends a bearer token with every request; the gateway prefers it
// to the client certificate.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// size is the encoded size of a store response.
func size(m proto.Message) int { return proto.Size(m) }

// seed creates n configmaps of about 1 KiB, unless they exist.
func seed(ctx context.Context, c *http.Client, api string, kv storev1.KVServiceClient, ns string, n int) error {
	for _, name := range []string{ns, ns + "-writes"} {
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, name)
		if resp, err := c.Post(api+"/api/v1/namespaces", "application/json", strings.NewReader(body)); err == nil {
			resp.Body.Close()
		}
	}
	if code, _ := getCode(c, fmt.Sprintf("%s/api/v1/namespaces/%s/configmaps/cm-%05d", api, ns, n-1)); code == 200 {
		return nil
	}
	value := strings.Repeat("x", 1000)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			cm := corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: map[string]string{"v": value}}
			b, _ := json.Marshal(cm)
			resp, err := c.Post(api+"/api/v1/namespaces/"+ns+"/configmaps", "application/json", bytes.NewReader(b))
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 201 && resp.StatusCode != 409 {
					err = fmt.Errorf("create: %s", resp.Status)
				}
			}
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	return first
}

func getCode(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func get(c *http.Client, url, accept string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return int(n), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return int(n), err
}

// chunked lists in pages of 500, following continue tokens. Each page is
// read whole and its token taken from its list metadata, without decoding
// its items: decoding 10,000 objects is the client's cost, which the
// store's chunked Range (its figure beside this one) does not include.
func chunked(c *http.Client, base, accept string) (int, error) {
	total, cont := 0, ""
	for {
		url := base + "?limit=500"
		if cont != "" {
			url += "&continue=" + neturl.QueryEscape(cont)
		}
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("Accept", accept)
		resp, err := c.Do(req)
		if err != nil {
			return total, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			return total, fmt.Errorf("chunk: %v %s", err, resp.Status)
		}
		total += len(body)
		if cont, err = continueToken(body, accept); err != nil {
			return total, err
		}
		if cont == "" {
			return total, nil
		}
	}
}

// continueToken reads a list's metadata.continue: in JSON, the metadata
// object comes before the items (kube-apiserver's field order, and ours);
// in protobuf, it is field 1 of the list inside the runtime.Unknown
// envelope's raw bytes (field 2), after the 4-byte "k8s\x00" prefix.
func continueToken(body []byte, accept string) (string, error) {
	if accept != "application/vnd.kubernetes.protobuf" {
		dec := json.NewDecoder(bytes.NewReader(body))
		if _, err := dec.Token(); err != nil { // {
			return "", err
		}
		for dec.More() {
			key, err := dec.Token()
			if err != nil {
				return "", err
			}
			if key != "metadata" {
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return "", err
				}
				continue
			}
			var meta metav1.ListMeta
			err = dec.Decode(&meta)
			return meta.Continue, err
		}
		return "", fmt.Errorf("list without metadata")
	}
	raw, err := protoField(bytes.TrimPrefix(body, []byte("k8s\x00")), 2)
	if err != nil {
		return "", err
	}
	b, err := protoField(raw, 1)
	if err != nil {
		return "", err
	}
	var meta metav1.ListMeta
	err = meta.Unmarshal(b)
	return meta.Continue, err
}

// protoField returns the bytes of the first length-delimited field num of
// the protobuf message b.
func protoField(b []byte, num protowire.Number) ([]byte, error) {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil, protowire.ParseError(l)
			}
			return v, nil
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return nil, fmt.Errorf("no field %d", num)
}

func watchStart(c *http.Client, base string) (int, error) {
	req, _ := http.NewRequest(http.MethodGet, base+"?watch=1&fieldSelector=metadata.name%3Dcm-00000", nil)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	n, err := resp.Body.Read(buf)
	if n == 0 {
		return 0, fmt.Errorf("watch: no event: %v", err)
	}
	return n, nil
}

type result struct {
	ops   int
	bytes int
	lat   []time.Duration
	err   error
	took  time.Duration
}

// merge adds o's operations and latencies to r.
func (r *result) merge(o result) {
	r.ops += o.ops
	r.bytes += o.bytes
	r.lat = append(r.lat, o.lat...)
	r.took += o.took
	if r.err == nil {
		r.err = o.err
	}
}

// p50 is the median latency.
func (r *result) p50() time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	lat := slices.Clone(r.lat)
	slices.Sort(lat)
	return lat[(len(lat)-1)/2]
}

// measure runs op from cc goroutines for d.
func measure(d time.Duration, cc int, op func() (int, error)) result {
	var mu sync.Mutex
	var all result
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; i < cc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			bytes, ops := 0, 0
			var ferr error
			for time.Now().Before(deadline) {
				t0 := time.Now()
				n, err := op()
				if err != nil {
					ferr = err
					break
				}
				lat = append(lat, time.Since(t0))
				bytes += n
				ops++
			}
			mu.Lock()
			all.ops += ops
			all.bytes += bytes
			all.lat = append(all.lat, lat...)
			if ferr != nil && all.err == nil {
				all.err = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	all.took = time.Since(start)
	return all
}

// report prints r's rate and latency percentiles and returns its p50.
func report(name string, cc int, r result) time.Duration {
	return reportOver(name, cc, r, 0)
}

// reportOver is report with an overhead column, r's p50 minus base, when
// base is not 0.
func reportOver(name string, cc int, r result, base time.Duration) time.Duration {
	if r.err != nil {
		fmt.Printf("%-44s %6d  error: %v\n", name, cc, r.err)
		return 0
	}
	sort.Slice(r.lat, func(i, j int) bool { return r.lat[i] < r.lat[j] })
	p := func(q float64) time.Duration {
		if len(r.lat) == 0 {
			return 0
		}
		return r.lat[int(q*float64(len(r.lat)-1))]
	}
	per := 0
	if r.ops > 0 {
		per = r.bytes / r.ops
	}
	over := ""
	if base != 0 {
		over = (p(0.50) - base).Round(time.Microsecond).String()
	}
	fmt.Printf("%-44s %6d %10.0f %10s %10s %12d %10s\n", name, cc, float64(r.ops)/r.took.Seconds(), p(0.50).Round(time.Microsecond), p(0.99).Round(time.Microsecond), per, over)
	return p(0.50)
}
