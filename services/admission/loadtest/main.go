// Command loadtest drives the admission service alone over real gRPC with
// 0, 1, 10 and 50 matching ValidatingAdmissionPolicies (3 validations and
// one variable each, bound with Deny, all admitting) on a 1 KiB ConfigMap
// create, and prints the service's CPU time per Admit and its throughput.
//
// It starts a store in process, writes the policies and bindings into it,
// and runs the admission service as a child process (this binary again,
// with --serve), so that the CPU time it reads from /proc/<pid>/stat is
// the service's alone; one child per policy count.
//
//	go run ./loadtest --duration 5s --policies 0,1,10,50
//
// On one core (the service on CPU 1 with GOMAXPROCS=1, the callers and the
// store on CPU 0):
//
//	go build -o /tmp/lt ./loadtest && taskset -c 0 /tmp/lt --service-cpu 1
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/procstat"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/admission/app"
	"github.com/meridian-cp/meridian/services/admission/internal/command"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	serve := fs.String("serve", "", "internal: serve the admission service over the store at this address, print its address, run until stdin closes")
	duration := fs.Duration("duration", 5*time.Second, "how long to measure each policy count")
	counts := fs.String("policies", "0,1,10,50", "comma-separated numbers of matching policies")
	conc := fs.Int("concurrency", 4, "concurrent Admit callers")
	distinct := fs.Bool("distinct", false, "give every policy expressions of its own (other constants), so no two policies share an expression")
	gcPercent := fs.Int("gc-percent", command.DefaultGCPercent, "the service child's GC target (its GOGC), as the admission binary's --gc-percent")
	serviceCPU := fs.String("service-cpu", "", "run the service child under `taskset -c` with this CPU list and GOMAXPROCS=1 (pin this process with taskset to other CPUs)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *serve != "" {
		return serveAdmission(ctx, *serve, out)
	}
	var ns []int
	for _, s := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return fmt.Errorf("bad policy count %q", s)
		}
		ns = append(ns, n)
	}

	dir, err := os.MkdirTemp("", "admission-loadtest-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := storeapp.New(ctx, storeapp.Config{ID: "store-0", DataDir: filepath.Join(dir, "store"), Bootstrap: true, Logger: quiet})
	if err != nil {
		return err
	}
	defer st.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = st.Serve(lis) }()
	storeAddr := lis.Addr().String()
	sc, err := storeclient.Dial([]string{storeAddr}, nil)
	if err != nil {
		return err
	}
	defer sc.Close()

	obj := configMap1KiB()
	fmt.Fprintf(out, "admission Admit of a %d-byte ConfigMap create, %d callers, %s per row; CPU is the service process's (utime+stime)\n", len(obj), *conc, *duration)
	fmt.Fprintf(out, "%-9s %10s %12s %10s\n", "policies", "admits", "admits/s", "CPU/Admit")
	for _, n := range ns {
		if err := writePolicies(ctx, sc, n, *distinct); err != nil {
			return err
		}
		r, err := measure(ctx, storeAddr, *serviceCPU, *gcPercent, n, obj, *conc, *duration)
		if err != nil {
			return fmt.Errorf("%d policies: %w", n, err)
		}
		fmt.Fprintf(out, "%-9d %10d %12.0f %8.1fµs   (service RSS %d MiB)\n", n, r.ops, float64(r.ops)/r.elapsed.Seconds(),
			float64(r.cpu.Microseconds())/float64(max(r.ops, 1)), r.rss>>20)
	}
	return nil
}

// serveAdmission is the child: the admission service over the store at
// storeAddr, on a loopback port it prints, until stdin closes.
func serveAdmission(ctx context.Context, storeAddr string, out io.Writer) error {
	a, err := app.New(ctx, app.Config{StoreAddress: storeAddr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	defer a.Close()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = a.Serve(lis) }()
	fmt.Fprintln(out, lis.Addr().String())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

type result struct {
	ops     int64
	elapsed time.Duration
	cpu     time.Duration
	rss     int64
}

// measure starts a service child over the store holding n policies (on
// cpus with GOMAXPROCS=1 when cpus is set), waits until its scope holds
// them, and calls Admit from conc callers for d.
func measure(ctx context.Context, storeAddr, cpus string, gcPercent, n int, obj []byte, conc int, d time.Duration) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	child := exec.CommandContext(ctx, self, "--serve", storeAddr)
	child.Env = append(os.Environ(), "GOGC="+strconv.Itoa(gcPercent))
	if cpus != "" {
		// taskset execs the service, so the child's pid is the service's,
		// and every thread it starts inherits the affinity.
		child = exec.CommandContext(ctx, "taskset", "-c", cpus, self, "--serve", storeAddr)
		child.Env = append(os.Environ(), "GOMAXPROCS=1", "GOGC="+strconv.Itoa(gcPercent))
	}
	stdin, err := child.StdinPipe()
	if err != nil {
		return result{}, err
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		return result{}, err
	}
	defer func() { _ = stdin.Close(); _ = child.Wait() }()
	addr, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return result{}, fmt.Errorf("the service did not start: %w", err)
	}
	conn, err := grpcclient.Dial(strings.TrimSpace(addr), nil)
	if err != nil {
		return result{}, err
	}
	defer conn.Close()
	c := admissionv1.NewAdmissionServiceClient(conn)
	if err := waitScope(ctx, c, n); err != nil {
		return result{}, err
	}
	req := &admissionv1.AdmitRequest{
		Uid: "u", Operation: admissionv1.Operation_OPERATION_CREATE,
		Kind:      &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource:  &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
		Namespace: "default", Name: "load", Object: obj,
		UserInfo: &admissionv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}},
	}
	// Warm up, and check every policy admits.
	for range 200 {
		resp, err := c.Admit(ctx, req)
		if err != nil {
			return result{}, err
		}
		if !resp.GetAllowed() {
			return result{}, fmt.Errorf("denied: %s", resp.GetStatus().GetMessage())
		}
	}
	pid := child.Process.Pid
	cpu0, err := procstat.CPU(pid)
	if err != nil {
		return result{}, err
	}
	var ops atomic.Int64
	var firstErr error
	var once sync.Once
	start := time.Now()
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if _, err := c.Admit(runCtx, req); err != nil {
					// gRPC's own deadline timer may fire just before
					// runCtx's: that is the end of the run, not an error.
					if runCtx.Err() == nil && status.Code(err) != codes.DeadlineExceeded {
						once.Do(func() { firstErr = err })
					}
					return
				}
				ops.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := procstat.CPU(pid)
	if err != nil {
		return result{}, err
	}
	rss, _ := procstat.RSS(pid)
	return result{ops: ops.Load(), elapsed: elapsed, cpu: cpu1 - cpu0, rss: rss}, firstErr
}

// waitScope waits until the service's scope holds n policies' rules.
func waitScope(ctx context.Context, c admissionv1.AdmissionServiceClient, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := c.WatchScope(ctx, &admissionv1.WatchScopeRequest{})
	if err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("waiting for %d policies in the scope: %w", n, err)
		}
		if len(resp.GetScope().GetRules()) == n {
			return nil
		}
	}
}

// configMap1KiB is a ConfigMap of about 1 KiB as JSON.
func configMap1KiB() []byte {
	var b strings.Builder
	b.WriteString(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"load","namespace":"default","labels":{"app":"load","tier":"backend"}},"data":{`)
	for i := range 9 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"key-%d":"%s"`, i, strings.Repeat("v", 90))
	}
	b.WriteString("}}")
	return []byte(b.String())
}

// writePolicies replaces the stored policies and bindings by n of each:
// the same expressions in each, or, when distinct, each policy's with
// constants of its own (the same cost).
func writePolicies(ctx context.Context, sc *storeclient.Client, n int, distinct bool) error {
	prefix := registry.KeyRoot + admissionregistrationv1.GroupName + "/"
	if _, err := sc.KV().Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestDeleteRange{
		RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(prefix), RangeEnd: storeclient.PrefixEnd(prefix)},
	}}}}); err != nil {
		return err
	}
	c, err := codec.New()
	if err != nil {
		return err
	}
	reg := registry.New(registry.AdmissionRegistration()...)
	gv := admissionregistrationv1.SchemeGroupVersion
	vap, _ := reg.Lookup(gv.WithResource("validatingadmissionpolicies"))
	vapb, _ := reg.Lookup(gv.WithResource("validatingadmissionpolicybindings"))
	put := func(res *registry.Resource, obj runtime.Object) error {
		res.Strategy.PrepareForCreate(obj)
		if errs := res.Strategy.Validate(obj); len(errs) > 0 {
			return errs.ToAggregate()
		}
		value, err := c.EncodeStorage(obj)
		if err != nil {
			return err
		}
		_, err = sc.KV().Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
			RequestPut: &storev1.PutRequest{Key: []byte(res.Key("", obj.(metav1.Object).GetName())), Value: value},
		}}}})
		return err
	}
	for i := range n {
		name := fmt.Sprintf("load-%03d", i)
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					},
				}}},
				Variables: []admissionregistrationv1.Variable{{Name: "labels", Expression: "object.metadata.?labels.orValue({})"}},
				Validations: []admissionregistrationv1.Validation{
					{Expression: "object.metadata.name.size() < 64"},
					{Expression: "!('forbidden' in variables.labels)"},
					{Expression: "object.data.all(k, k.size() < 256)"},
				},
			},
		}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
		if distinct {
			// The variable differs in its text only: it has no constant.
			p.Spec.Variables[0].Expression += strings.Repeat(" ", i)
			p.Spec.Validations[0].Expression = fmt.Sprintf("object.metadata.name.size() < %d", 64+i)
			p.Spec.Validations[1].Expression = fmt.Sprintf("!('forbidden-%d' in variables.labels)", i)
			p.Spec.Validations[2].Expression = fmt.Sprintf("object.data.all(k, k.size() < %d)", 256+i)
		}
		if err := put(vap, p); err != nil {
			return err
		}
		if err := put(vapb, b); err != nil {
			return err
		}
	}
	return nil
}
