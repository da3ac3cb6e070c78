package msgboard_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	msgboard "github.com/msgboard/msgboard/clients/go"
	"google.golang.org/grpc/codes"
)

// writePEM writes one PEM block to dir/name.
func writePEM(t *testing.T, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// certificate makes a key and a certificate of tpl for it, signed by
// parent's key (self-signed when parent is nil).
func certificate(t *testing.T, tpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if parent == nil {
		parent, parentKey = tpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return key, der
}

// pki makes a CA and a server certificate for 127.0.0.1 signed by it;
// returns the CA file, the certificate file and the key file.
func pki(t *testing.T, dir string) (ca, cert, key string) {
	t.Helper()
	caTpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "msgboard test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caKey, caDER := certificate(t, caTpl, nil, nil)
	srvTpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvKey, srvDER := certificate(t, srvTpl, caTpl, caKey)
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER),
		writePEM(t, dir, "server.pem", "CERTIFICATE", srvDER),
		writePEM(t, dir, "server.key", "PRIVATE KEY", keyDER)
}

func TestTLSWithAToken(t *testing.T) {
	dir := t.TempDir()
	ca, cert, key := pki(t, dir)
	token := "s3cret-go-token"
	sum := sha256.Sum256([]byte(token))
	users := filepath.Join(dir, "users.toml")
	err := os.WriteFile(users, []byte(`[[user]]
name = "gopher"
token_sha256 = "`+hex.EncodeToString(sum[:])+`"
[[user.allow]]
queues = "jobs*"
verbs = ["read", "write", "manage"]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := startServer("--tls-cert", cert, "--tls-key", key, "--users", users)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()

	c, err := msgboard.Dial(srv.address, msgboard.WithTLSFiles(ca, "", ""), msgboard.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "jobs"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Post(ctx(t), "jobs", msgboard.Message{Tuple: []any{"over TLS"}}); err != nil {
		t.Fatal(err)
	}
	// Streams carry the token too.
	sub, err := c.Subscribe(ctx(t), msgboard.Subscribe{Queue: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := sub.Next(ctx(t))
	if err != nil || d.Message.Tuple[0] != "over TLS" {
		t.Fatalf("subscribed over TLS: %v, %v", d, err)
	}
	if err := sub.Close(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The rules still apply to a known user.
	_, err = c.CreateQueue(ctx(t), msgboard.QueueSpec{Name: "other"})
	var e *msgboard.Error
	if !errors.As(err, &e) || e.Code != codes.PermissionDenied || e.Metadata["user"] != "gopher" || e.Metadata["queue"] != "other" {
		t.Fatalf("a queue outside the user's rules gave %#v", err)
	}

	anon, err := msgboard.Dial(srv.address, msgboard.WithTLSFiles(ca, "", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.ListQueues(ctx(t)); !msgboard.IsCode(err, codes.Unauthenticated) {
		t.Fatalf("no token gave %v", err)
	}
	plain, err := msgboard.Dial(srv.address, msgboard.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.ListQueues(ctx(t)); !msgboard.IsCode(err, codes.Unavailable) {
		t.Fatalf("plaintext to a TLS board gave %v", err)
	}
}

func TestATokenIsNeverSentInPlaintextToAnotherHost(t *testing.T) {
	if _, err := msgboard.Dial("192.0.2.1:7878", msgboard.WithToken("t")); err == nil {
		t.Fatal("a token in plaintext to a non-loopback address was accepted")
	}
	c, err := msgboard.Dial("192.0.2.1:7878")
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
