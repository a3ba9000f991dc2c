package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

// operatorRBAC is what an operator's Helm chart grants its ServiceAccount:
// its ConfigMaps, Leases for leader election, and Events; nothing else.
const operatorRBAC = `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: copier
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, list, watch, create, update, patch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: copier
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: copier
subjects:
- kind: ServiceAccount
  name: operator
  namespace: crt
`

// logRecord is a logr.LogSink that keeps every line logged through it
// (messages, key/values and errors as text), so a test can look for an
// error the manager's informers or leader election logged.
type logRecord struct {
	mu    *sync.Mutex
	lines *[]string
	kvs   []any
	name  string
}

func newLogRecord() *logRecord { return &logRecord{mu: &sync.Mutex{}, lines: &[]string{}} }

// reset forgets the lines recorded so far.
func (l *logRecord) reset() {
	l.mu.Lock()
	*l.lines = nil
	l.mu.Unlock()
}

// runtimeLog records what controller-runtime logs. Its global logger
// takes only the first logger it is given in a process, so it is set to
// this record once (setRuntimeLog) and each test resets the record.
var (
	runtimeLog    = newLogRecord()
	setRuntimeLog sync.Once
)

func (l *logRecord) Init(logr.RuntimeInfo) {}

// Enabled records levels up to 2: errors and what controllers log by
// default, not the per-request V(4) detail.
func (l *logRecord) Enabled(level int) bool { return level <= 2 }

func (l *logRecord) add(kind string, err error, msg string, kvs []any) {
	line := fmt.Sprintf("%s %s: %s %v %v", kind, l.name, msg, append(append([]any{}, l.kvs...), kvs...), err)
	l.mu.Lock()
	*l.lines = append(*l.lines, line)
	l.mu.Unlock()
}

func (l *logRecord) Info(_ int, msg string, kvs ...any) { l.add("info", nil, msg, kvs) }

func (l *logRecord) Error(err error, msg string, kvs ...any) { l.add("error", err, msg, kvs) }

func (l *logRecord) WithValues(kvs ...any) logr.LogSink {
	c := *l
	c.kvs = append(append([]any{}, l.kvs...), kvs...)
	return &c
}

func (l *logRecord) WithName(name string) logr.LogSink {
	c := *l
	c.name = strings.TrimPrefix(l.name+"/"+name, "/")
	return &c
}

// matching returns the lines recorded so far that contain s, case
// insensitively.
func (l *logRecord) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range *l.lines {
		if strings.Contains(strings.ToLower(line), strings.ToLower(s)) {
			out = append(out, line)
		}
	}
	return out
}

// copier reconciles each ConfigMap labelled app=source into a ConfigMap
// <name>-copy with the same data, owned by the source (so the garbage
// collector deletes the copy with it), and records an Event for it.
type copier struct {
	client   client.Client
	scheme   *runtime.Scheme
	recorder events.EventRecorder
}

func (r *copier) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var src corev1.ConfigMap
	if err := r.client.Get(ctx, req.NamespacedName, &src); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if src.Labels["app"] != "source" || src.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	dst := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: src.Namespace, Name: src.Name + "-copy"}}
	op, err := controllerutil.CreateOrUpdate(ctx, r.client, dst, func() error {
		dst.Data = src.Data
		return controllerutil.SetControllerReference(&src, dst, r.scheme)
	})
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("copying %s: %w", req.NamespacedName, err)
	}
	if op != controllerutil.OperationResultNone {
		r.recorder.Eventf(&src, dst, corev1.EventTypeNormal, "Copied", "Copy", "%s %s", dst.Name, op)
	}
	return ctrl.Result{}, nil
}

// TestControllerRuntimeServiceAccountClusterRole: a controller-runtime
// Manager running as a ServiceAccount (a `kubectl create token` bearer
// token and the API's CA, no client certificate) with exactly its chart's
// ClusterRole elects a leader, keeps its cache and reconciles without a
// single Forbidden, is refused (403, upstream's wording) what the role
// does not grant, and loses its writes once the binding is deleted.
func TestControllerRuntimeServiceAccountClusterRole(t *testing.T) {
	requireKubectl(t)
	// controller-runtime's informers, leader election and events.k8s.io
	// broadcaster log through its logger (the context's); the core/v1
	// event broadcaster logs through klog's global logger, which cannot
	// be swapped while its goroutines run, so its writes are checked by
	// reading the events instead.
	rec := runtimeLog
	setRuntimeLog.Do(func() { ctrl.SetLogger(logr.New(rec)) })
	rec.reset()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the manager's log:\n%s", strings.Join(rec.matching(""), "\n"))
		}
	})
	cp := start(t, "")
	cp.createNamespace("crt")
	cp.kubectl("-n", "crt", "create", "serviceaccount", "operator")
	cp.kubectl("apply", "-f", manifest(t, "rbac.yaml", operatorRBAC))
	token := strings.TrimSpace(cp.kubectl("-n", "crt", "create", "token", "operator", "--duration=10m"))
	cfg := cp.bearerConfig(token)
	const user = "system:serviceaccount:crt:operator"

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	// The binding applies within a second; wait for it (a bound that
	// catches a hang) before the manager starts, so that nothing it logs
	// is a Forbidden from before its role existed.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := direct.List(context.Background(), &corev1.ConfigMapList{}, client.InNamespace("crt"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator may not list ConfigMaps 10s after its binding: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	leaseDuration, renewDeadline, retryPeriod := 15*time.Second, 10*time.Second, time.Second
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  logr.New(rec),
		LeaderElection:          true,
		LeaderElectionID:        "copier",
		LeaderElectionNamespace: "crt",
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retryPeriod,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	isSource := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()["app"] == "source" })
	// Controller names are unique per process (for metrics); a rerun of
	// this test (-count) names its controller again.
	skipNameValidation := true
	err = ctrl.NewControllerManagedBy(mgr).Named("copier").
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		For(&corev1.ConfigMap{}, builder.WithPredicates(isSource)).
		Complete(&copier{client: mgr.GetClient(), scheme: scheme, recorder: mgr.GetEventRecorder("copier")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	stop := func() {
		cancel()
		select {
		case err := <-stopped:
			if err != nil {
				t.Errorf("the manager stopped with %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the manager did not stop within 15s of its context's cancel")
		}
	}
	defer func() {
		if ctx.Err() == nil {
			stop()
		}
	}()
	select {
	case <-mgr.Elected():
	case err := <-stopped:
		t.Fatalf("the manager stopped before it was elected: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the manager was not elected leader within 20s")
	}

	// The copies follow their sources: created, updated, deleted (by the
	// garbage collector, through the owner reference).
	admin := cp.client()
	copyOf := func(name string) (*corev1.ConfigMap, error) {
		return admin.CoreV1().ConfigMaps("crt").Get(context.Background(), name+"-copy", metav1.GetOptions{})
	}
	waitFor := func(what string, ok func() (bool, error)) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			done, err := ok()
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s (last error %v)", what, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cp.kubectl("-n", "crt", "create", "configmap", "alpha", "--from-literal=k=v1")
	cp.kubectl("-n", "crt", "label", "configmap", "alpha", "app=source")
	cp.kubectl("-n", "crt", "create", "configmap", "plain", "--from-literal=k=v")
	cp.kubectl("apply", "-f", manifest(t, "beta.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: beta, namespace: crt, labels: {app: source}}\ndata: {a: '1', b: '2'}\n"))
	src, err := admin.CoreV1().ConfigMaps("crt").Get(context.Background(), "alpha", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("alpha-copy created", func() (bool, error) {
		c, err := copyOf("alpha")
		return err == nil && c.Data["k"] == "v1", err
	})
	c, _ := copyOf("alpha")
	if refs := c.OwnerReferences; len(refs) != 1 || refs[0].UID != src.UID || refs[0].Kind != "ConfigMap" || refs[0].Controller == nil || !*refs[0].Controller {
		t.Errorf("alpha-copy's owner references: %+v, want the controller reference to alpha (uid %s)", refs, src.UID)
	}
	waitFor("beta-copy created", func() (bool, error) {
		c, err := copyOf("beta")
		return err == nil && c.Data["a"] == "1" && c.Data["b"] == "2", err
	})
	cp.kubectl("-n", "crt", "patch", "configmap", "alpha", "-p", `{"data":{"k":"v2","n":"new"}}`)
	waitFor("alpha-copy updated", func() (bool, error) {
		c, err := copyOf("alpha")
		return err == nil && c.Data["k"] == "v2" && c.Data["n"] == "new", err
	})
	cp.kubectl("-n", "crt", "delete", "configmap", "beta")
	waitFor("beta-copy deleted with beta", func() (bool, error) {
		_, err := copyOf("beta")
		return apierrors.IsNotFound(err), err
	})
	if _, err := copyOf("plain"); !apierrors.IsNotFound(err) {
		t.Errorf("a ConfigMap without app=source was copied: %v", err)
	}
	waitFor("the LeaderElection event recorded", func() (bool, error) {
		list, err := admin.CoreV1().Events("crt").List(context.Background(), metav1.ListOptions{FieldSelector: "reason=LeaderElection"})
		for _, ev := range list.Items {
			if ev.InvolvedObject.Kind == "Lease" && ev.InvolvedObject.Name == "copier" && strings.HasSuffix(ev.Message, " became leader") {
				return true, nil
			}
		}
		return false, err
	})
	waitFor("the Copied event recorded", func() (bool, error) {
		list, err := admin.EventsV1().Events("crt").List(context.Background(), metav1.ListOptions{})
		for _, ev := range list.Items {
			if ev.Reason == "Copied" && ev.Regarding.Name == "alpha" && ev.Related != nil && ev.Related.Name == "alpha-copy" {
				return true, nil
			}
		}
		return false, err
	})

	// The lease is the manager's: controller-runtime's identity is the
	// host name and a random suffix.
	lease, err := admin.CoordinationV1().Leases("crt").Get(context.Background(), "copier", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if id := lease.Spec.HolderIdentity; id == nil || !strings.HasPrefix(*id, host+"_") {
		t.Errorf("the lease is held by %v, want the manager (%s_...)", lease.Spec.HolderIdentity, host)
	}

	// The record holds the cache's informer lines (so the check below
	// could see a Forbidden) and none is a Forbidden.
	if len(rec.matching("Caches populated")) == 0 {
		t.Error("the record holds no line of the manager's cache; its logger is not recorded")
	}
	if lines := rec.matching("forbidden"); len(lines) > 0 {
		t.Errorf("the manager logged Forbidden with its ClusterRole:\n%s", strings.Join(lines, "\n"))
	}

	// Outside the role: 403 in upstream's words.
	bg := context.Background()
	refused := []struct {
		what, message string
		err           error
	}{
		{"list secrets", `secrets is forbidden: User "` + user + `" cannot list resource "secrets" in API group "" in the namespace "crt"`,
			direct.List(bg, &corev1.SecretList{}, client.InNamespace("crt"))},
		{"delete a namespace", `namespaces "crt" is forbidden: User "` + user + `" cannot delete resource "namespaces" in API group "" in the namespace "crt"`,
			direct.Delete(bg, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "crt"}})},
		{"create a ClusterRoleBinding", `clusterrolebindings.rbac.authorization.k8s.io is forbidden: User "` + user + `" cannot create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope`,
			direct.Create(bg, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "crt", Name: "operator"}}})},
	}
	for _, r := range refused {
		if !apierrors.IsForbidden(r.err) || r.err.Error() != r.message {
			t.Errorf("%s: %v, want 403 %q", r.what, r.err, r.message)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Get(bg, "crt", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace crt after the refused delete: %v", err)
	}

	// The binding is what grants the access: without it the manager's
	// writes are refused within a few seconds.
	cp.kubectl("delete", "clusterrolebinding", "copier")
	var werr error
	waitFor("the manager's writes forbidden after the binding's deletion", func() (bool, error) {
		werr = mgr.GetClient().Create(bg, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "crt", GenerateName: "probe-"}})
		return apierrors.IsForbidden(werr), werr
	})
	want := `configmaps is forbidden: User "` + user + `" cannot create resource "configmaps" in API group "" in the namespace "crt"`
	if werr.Error() != want {
		t.Errorf("create after the binding's deletion: %v, want %q", werr, want)
	}
	cp.kubectl("-n", "crt", "create", "configmap", "gamma", "--from-literal=k=v")
	cp.kubectl("-n", "crt", "label", "configmap", "gamma", "app=source")
	waitFor("the reconciler's refused copy of gamma logged", func() (bool, error) {
		return len(rec.matching(`cannot create resource "configmaps"`)) > 0, nil
	})
	if _, err := copyOf("gamma"); !apierrors.IsNotFound(err) {
		t.Errorf("gamma was copied without the binding: %v", err)
	}

	stop()
}
