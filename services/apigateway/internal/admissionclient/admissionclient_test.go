package admissionclient_test

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/polltest"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/admissiontest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/admissionclient"
)

const create = admissionv1.Operation_OPERATION_CREATE

// TestFollowsScope runs the client against the real admission service:
// everything is in scope until the first scope arrives, scope changes
// apply, a restart of the service unsyncs and resyncs the client, and an
// older service leaves it unsynced.
func TestFollowsScope(t *testing.T) {
	policies := admissiontest.NewPolicies(admissiontest.Scope{})
	svc := admissiontest.Start(t, "127.0.0.1:0", policies, admissiontest.Options{})
	conn, err := grpcclient.Dial(svc.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := admissionclient.New(conn, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.InScope(create, "", "configmaps", "") || c.Synced() {
		t.Fatal("out of scope before any scope arrived")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	polltest.Until(t, 20*time.Second, "synced", c.Synced)
	if c.InScope(create, "", "configmaps", "") {
		t.Fatal("in the empty scope")
	}
	policies.SetScope(admissiontest.Scope{Rules: []admissiontest.Rule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}})
	polltest.Until(t, 20*time.Second, "configmaps in scope", func() bool { return c.InScope(create, "", "configmaps", "") })
	if c.InScope(create, "", "secrets", "") {
		t.Fatal("secrets in scope")
	}

	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 20*time.Second, "unsynced", func() bool { return !c.Synced() })
	if !c.InScope(create, "", "secrets", "") {
		t.Fatal("out of scope while unsynced")
	}
	svc = admissiontest.Start(t, svc.Addr, policies, admissiontest.Options{})
	polltest.Until(t, 20*time.Second, "resynced", c.Synced)
	if c.InScope(create, "", "secrets", "") || !c.InScope(create, "", "configmaps", "") {
		t.Fatal("scope not restored after the restart")
	}

	if err := svc.Stop(); err != nil {
		t.Fatal(err)
	}
	admissiontest.Start(t, svc.Addr, policies, admissiontest.Options{Older: true})
	polltest.Until(t, 20*time.Second, "unsynced", func() bool { return !c.Synced() })
	time.Sleep(200 * time.Millisecond) // the client has asked again, and been refused
	if c.Synced() || !c.InScope(create, "", "secrets", "") {
		t.Fatal("synced with an older service")
	}
}
