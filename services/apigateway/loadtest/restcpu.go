package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// restCPU measures the server CPU time per REST GET of one ConfigMap and
// per REST create of one, as the user of token, on each target: gateways
// run side by side (say, one with --authorization-mode=RBAC and one with
// AlwaysAllow), in rounds of slices of d, the targets' order alternating
// from round to round. The CPU is the whole server process's, read from
// /proc before and after each slice.
//
// Each target is prepared as its admin (tlsConf's certificate): a
// namespace loadtest-rbac where a Role and RoleBinding let user get and
// create config maps, and, with bindings > 0, that many further
// RoleBindings (ten in each of bindings/10 namespaces) and clusterBindings
// ClusterRoleBindings naming other users and groups, so that the
// authorizer decides among as many bindings as a cluster would hold.
//
// The targets named in saTargets are called instead as the service
// account loadtest-rbac/loadtest, with a token restCPU requests for it
// (TokenRequest) and the same grant: name one gateway twice, once there,
// to compare the CPU of a request with a service account token to one
// with token. measured names the operations: "GET", "create" or both.
func restCPU(tlsConf *tls.Config, token, user, spec string, saTargets map[string]bool, d time.Duration, cc, rounds, bindings, clusterBindings int, measured []string) error {
	targets, err := parseCPUTargets(spec)
	if err != nil {
		return err
	}
	admin := &http.Client{Transport: &http2.Transport{TLSClientConfig: tlsConf}}
	const ns = "loadtest-rbac"
	callers := map[string]*http.Client{}
	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q},"data":{"v":"` + strings.Repeat("x", 1000) + `"}}`
	for _, t := range targets {
		api := "https://" + t.addr
		user, token := user, token
		if saTargets[t.name] {
			if user, token, err = serviceAccountToken(admin, api, ns, "loadtest"); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
		caller := &http.Client{Transport: bearer{token: token, next: &http2.Transport{TLSClientConfig: tlsConf}}}
		callers[t.name] = caller
		if err := prepareRBAC(admin, api, ns, user, bindings, clusterBindings); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		if _, err := send(admin, http.MethodPost, api+"/api/v1/namespaces/"+ns+"/configmaps", "application/json", []byte(fmt.Sprintf(cm, "loadtest-get")), http.StatusCreated); err != nil && !strings.Contains(err.Error(), "409") {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		// The grant applies once the gateway's RBAC watch delivers it.
		for deadline := time.Now().Add(10 * time.Second); ; {
			code, err := getCode(caller, api+"/api/v1/namespaces/"+ns+"/configmaps/loadtest-get")
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: %s may not read the config map: %d %v", t.name, user, code, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Created names are unique across runs and concurrencies.
	run := time.Now().UnixNano()
	var created atomic.Int64
	ops := map[string]func(caller *http.Client, api string) func() (int, error){
		"GET": func(caller *http.Client, api string) func() (int, error) {
			return func() (int, error) {
				return get(caller, api+"/api/v1/namespaces/"+ns+"/configmaps/loadtest-get", "application/json")
			}
		},
		"create": func(caller *http.Client, api string) func() (int, error) {
			return func() (int, error) {
				body := []byte(fmt.Sprintf(cm, fmt.Sprintf("loadtest-%d-%d", run, created.Add(1))))
				return send(caller, http.MethodPost, api+"/api/v1/namespaces/"+ns+"/configmaps", "application/json", body, http.StatusCreated)
			}
		},
	}
	return compareCPU(targets, measured, func(t *cpuTarget, op string) func() (int, error) {
		return ops[op](callers[t.name], "https://"+t.addr)
	}, d, cc, rounds)
}

// compareCPU measures the server CPU time per operation of each of
// measured on each target: a warm-up second each, then rounds of slices
// of d per operation and target, the targets' order alternating from
// round to round. op returns the function that runs one operation on a
// target. The CPU is the whole server process's (/proc, processCPU).
func compareCPU(targets []*cpuTarget, measured []string, op func(t *cpuTarget, op string) func() (int, error), d time.Duration, cc, rounds int) error {
	for _, t := range targets {
		for _, name := range measured {
			if r := measure(time.Second, cc, op(t, name)); r.err != nil {
				return fmt.Errorf("%s: %s: %w", t.name, name, r.err)
			}
		}
	}
	width := 7
	for _, name := range measured {
		width = max(width, len(name))
	}
	fmt.Printf("%-10s %-*s %6s %6s %10s %10s %14s\n", "gateway", width, "op", "round", "conc", "ops/s", "p50", "CPU µs/op")
	perOp := map[string][]float64{}
	for round := range rounds {
		order := slices.Clone(targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range measured {
			for _, t := range order {
				before, err := processCPU(t.pid)
				if err != nil {
					return err
				}
				r := measure(d, cc, op(t, name))
				after, err := processCPU(t.pid)
				if err != nil {
					return err
				}
				if r.err != nil {
					return fmt.Errorf("%s: %s: %w", t.name, name, r.err)
				}
				us := float64((after - before).Microseconds()) / float64(r.ops)
				perOp[t.name+" "+name] = append(perOp[t.name+" "+name], us)
				fmt.Printf("%-10s %-*s %6d %6d %10.0f %10s %14.0f\n", t.name, width, name, round, cc, float64(r.ops)/r.took.Seconds(), r.p50().Round(time.Microsecond), us)
			}
		}
	}
	for _, name := range measured {
		for _, t := range targets {
			v := slices.Sorted(slices.Values(perOp[t.name+" "+name]))
			fmt.Printf("%-10s median CPU per %s %.0f µs (rounds: min %.0f, max %.0f), concurrency %d\n", t.name, name, v[len(v)/2], v[0], v[len(v)-1], cc)
		}
	}
	return nil
}

// prepareRBAC creates, as the admin, the namespace of the measured
// requests, the grant of user there, and the extra bindings (see restCPU).
// Objects that exist already are kept.
func prepareRBAC(admin *http.Client, api, ns, user string, bindings, clusterBindings int) error {
	const rbac = "/apis/rbac.authorization.k8s.io/v1"
	post := func(path, body string) error {
		_, err := send(admin, http.MethodPost, api+path, "application/json", []byte(body), http.StatusCreated)
		if err != nil && strings.Contains(err.Error(), "409") {
			return nil
		}
		return err
	}
	namespaces := []string{ns}
	for i := range bindings / 10 {
		namespaces = append(namespaces, fmt.Sprintf("%s-%d", ns, i))
	}
	for _, n := range namespaces {
		if err := post("/api/v1/namespaces", fmt.Sprintf(`{"metadata":{"name":%q}}`, n)); err != nil {
			return err
		}
	}
	if err := post(rbac+"/namespaces/"+ns+"/roles", `{"metadata":{"name":"rw"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["get","create"]}]}`); err != nil {
		return err
	}
	// One binding per user: targets that share a gateway (see saTargets)
	// each get theirs.
	if err := post(rbac+"/namespaces/"+ns+"/rolebindings", fmt.Sprintf(`{"metadata":{"name":%q},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"rw"},"subjects":[{"kind":"User","name":%q}]}`, "rw-"+user, user)); err != nil {
		return err
	}
	for i := range bindings {
		body := fmt.Sprintf(`{"metadata":{"name":"b-%d"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"user-%d"},{"kind":"Group","name":"team-%d"}]}`, i, i, i%10)
		if err := post(fmt.Sprintf("%s/namespaces/%s-%d/rolebindings", rbac, ns, i/10), body); err != nil {
			return err
		}
	}
	for i := range clusterBindings {
		body := fmt.Sprintf(`{"metadata":{"name":"loadtest-%d"},"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"view"},"subjects":[{"kind":"User","name":"user-%d"},{"kind":"Group","name":"cluster-team-%d"}]}`, i, i, i)
		if err := post(rbac+"/clusterrolebindings", body); err != nil {
			return err
		}
	}
	return nil
}

// serviceAccountToken creates, as the admin, the namespace ns and the
// service account ns/name (both kept when they exist) and requests a
// token for it; it returns the account's user name and the token.
func serviceAccountToken(admin *http.Client, api, ns, name string) (string, string, error) {
	for _, c := range []struct{ path, body string }{
		{"/api/v1/namespaces", fmt.Sprintf(`{"metadata":{"name":%q}}`, ns)},
		{"/api/v1/namespaces/" + ns + "/serviceaccounts", fmt.Sprintf(`{"metadata":{"name":%q}}`, name)},
	} {
		if _, err := send(admin, http.MethodPost, api+c.path, "application/json", []byte(c.body), http.StatusCreated); err != nil && !strings.Contains(err.Error(), "409") {
			return "", "", err
		}
	}
	resp, err := admin.Post(api+"/api/v1/namespaces/"+ns+"/serviceaccounts/"+name+"/token", "application/json",
		strings.NewReader(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{"expirationSeconds":86400}}`))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tr); err != nil || resp.StatusCode != http.StatusCreated || tr.Status.Token == "" {
		return "", "", fmt.Errorf("token request for %s/%s: %s %v", ns, name, resp.Status, err)
	}
	return "system:serviceaccount:" + ns + ":" + name, tr.Status.Token, nil
}
