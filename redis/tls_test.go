package redis

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/testenv"
)

// TestTLS: rediss:// reaches a server's TLS port; without skip_verify a
// self-signed certificate is refused.
func TestTLS(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "dlock test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	testenv.NewRedis(t, &testenv.RedisOptions{Config: []string{
		"tls-port " + strconv.Itoa(port),
		"tls-cert-file " + certFile,
		"tls-key-file " + keyFile,
		"tls-ca-cert-file " + certFile,
		"tls-auth-clients no",
	}})
	base := "rediss://127.0.0.1:" + strconv.Itoa(port) + "/0"

	l := open(t, ctx, base+"?skip_verify=true")
	ls, err := l.TryAcquire(ctx, uniqueName(t), nil)
	if err != nil {
		t.Fatalf("over TLS: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}

	strict := open(t, ctx, base+"?dial_timeout=2s")
	if _, err := strict.TryAcquire(ctx, uniqueName(t), nil); err == nil {
		t.Error("a self-signed certificate was accepted without skip_verify")
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("want a certificate error, got %v", err)
	}
}
