// Package kmstest runs a KMS v2 plugin for tests: a real
// k8s.io/kms KeyManagementService gRPC server on a Unix socket, which
// holds its key encryption keys (KEKs) in memory.
//
// A KEK encrypts with AES-256-GCM: ciphertext = nonce (12) | sealed, the
// key id authenticated with it. Rotate makes a new KEK the current one;
// the old ones still decrypt, as a real KMS keeps old key versions.
package kmstest

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	kmsapi "k8s.io/kms/apis/v2"
)

// AnnotationKey is the annotation the plugin returns with every encrypted
// data key (the KEK's version), which it checks on Decrypt.
const AnnotationKey = "version.kms.meridian.test"

// Plugin is a running plugin. Its methods are safe for concurrent use.
type Plugin struct {
	// Endpoint is the plugin's address for an EncryptionConfiguration:
	// unix:///<socket>.
	Endpoint string

	srv *grpc.Server

	mu      sync.Mutex
	keks    map[string]cipher.AEAD // guarded by mu
	current string                 // guarded by mu
	healthz string                 // guarded by mu

	status, encrypts, decrypts atomic.Int64
}

// Start serves a plugin on a new socket, with one KEK, key id "key-1",
// until the test ends.
func Start(t testing.TB) *Plugin {
	t.Helper()
	// Socket paths are limited to about 100 bytes: t.TempDir's can be
	// longer.
	dir, err := os.MkdirTemp("", "kms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "kms.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	p := &Plugin{Endpoint: "unix://" + sock, srv: grpc.NewServer(), keks: map[string]cipher.AEAD{}, healthz: "ok"}
	if err := p.AddKey("key-1", make32()); err != nil {
		t.Fatal(err)
	}
	kmsapi.RegisterKeyManagementServiceServer(p.srv, &service{p: p})
	go func() { _ = p.srv.Serve(lis) }()
	t.Cleanup(p.Stop)
	return p
}

func make32() []byte {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return k
}

// AddKey makes kek the current KEK, under key id id.
func (p *Plugin) AddKey(id string, kek []byte) error {
	b, err := aes.NewCipher(kek)
	if err != nil {
		return err
	}
	a, err := cipher.NewGCM(b)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keks[id], p.current = a, id
	return nil
}

// Rotate makes a new random KEK current and returns its key id.
func (p *Plugin) Rotate() string {
	p.mu.Lock()
	id := fmt.Sprintf("key-%d", len(p.keks)+1)
	p.mu.Unlock()
	if err := p.AddKey(id, make32()); err != nil {
		panic(err) // a 32-byte key always makes a cipher
	}
	return id
}

// KeyID returns the current key id.
func (p *Plugin) KeyID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.current
}

// SetHealthz sets what Status reports as healthz ("ok" is healthy).
func (p *Plugin) SetHealthz(h string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.healthz = h
}

// Calls returns how many Status, Encrypt and Decrypt calls the plugin
// served.
func (p *Plugin) Calls() (status, encrypts, decrypts int64) {
	return p.status.Load(), p.encrypts.Load(), p.decrypts.Load()
}

// Stop stops serving; calls fail from then on. It is safe to call more
// than once.
func (p *Plugin) Stop() { p.srv.Stop() }

// service is the plugin's KeyManagementService.
type service struct {
	kmsapi.UnimplementedKeyManagementServiceServer
	p *Plugin
}

func (s *service) Status(context.Context, *kmsapi.StatusRequest) (*kmsapi.StatusResponse, error) {
	s.p.status.Add(1)
	s.p.mu.Lock()
	defer s.p.mu.Unlock()
	return &kmsapi.StatusResponse{Version: "v2", Healthz: s.p.healthz, KeyId: s.p.current}, nil
}

func (s *service) Encrypt(_ context.Context, req *kmsapi.EncryptRequest) (*kmsapi.EncryptResponse, error) {
	s.p.encrypts.Add(1)
	s.p.mu.Lock()
	id, kek := s.p.current, s.p.keks[s.p.current]
	s.p.mu.Unlock()
	nonce := make([]byte, kek.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &kmsapi.EncryptResponse{
		Ciphertext:  kek.Seal(nonce, nonce, req.GetPlaintext(), []byte(id)),
		KeyId:       id,
		Annotations: map[string][]byte{AnnotationKey: []byte(id)},
	}, nil
}

// errUnknownKey is a Decrypt with a key id the plugin never had.
var errUnknownKey = errors.New("kmstest: unknown key id")

func (s *service) Decrypt(_ context.Context, req *kmsapi.DecryptRequest) (*kmsapi.DecryptResponse, error) {
	s.p.decrypts.Add(1)
	s.p.mu.Lock()
	kek := s.p.keks[req.GetKeyId()]
	s.p.mu.Unlock()
	if kek == nil {
		return nil, status.Error(codes.InvalidArgument, fmt.Sprintf("%v: %q", errUnknownKey, req.GetKeyId()))
	}
	if string(req.GetAnnotations()[AnnotationKey]) != req.GetKeyId() {
		return nil, status.Error(codes.InvalidArgument, "kmstest: the annotations do not match the key id")
	}
	c := req.GetCiphertext()
	if len(c) < kek.NonceSize() {
		return nil, status.Error(codes.InvalidArgument, "kmstest: short ciphertext")
	}
	plain, err := kek.Open(nil, c[:kek.NonceSize()], c[kek.NonceSize():], []byte(req.GetKeyId()))
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "kmstest: "+err.Error())
	}
	return &kmsapi.DecryptResponse{Plaintext: plain}, nil
}
