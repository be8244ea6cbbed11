package s3store

import (
	"context"
	"crypto/tls"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
)

// TestCAFile: versitygw behind a TLS-terminating proxy whose certificate
// comes from a CA of the test's. With that CA as CAFile a real S3
// conversation happens over TLS; without it (the system's roots) or with
// another CA the request fails once with a certificate error, not
// retried; AWS_CA_BUNDLE still works when CAFile is empty, and CAFile
// wins over it; a file that is missing, not PEM or a key fails New with
// ErrCAFile.
func TestCAFile(t *testing.T) {
	env := testenv.S3(t)
	u, err := url.Parse(env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ca, other := testenv.NewCA(t), testenv.NewCA(t)
	proxy := testenv.NewTLSProxy(t, u.Host, ca.ServerTLS(t, "127.0.0.1"))
	tlsEnv := env
	tlsEnv.Endpoint = "https://" + proxy.Addr()
	caFile, otherFile := ca.File(t), other.File(t)
	t.Setenv("AWS_CA_BUNDLE", "")
	ctx := context.Background()

	works := func(t *testing.T, cfg objstore.S3Config) {
		t.Helper()
		s := newStoreAt(t, tlsEnv, cfg)
		b := newBucket(t, s, "tls")
		if err := s.PutIfAbsent(ctx, b, "k", []byte("over TLS")); err != nil {
			t.Fatalf("put: %v", err)
		}
		got, _, err := s.GetRange(ctx, b, "k", 0, 8)
		if err != nil || string(got) != "over TLS" {
			t.Fatalf("get: %q, %v", got, err)
		}
	}
	refused := func(t *testing.T, cfg objstore.S3Config) {
		t.Helper()
		s := newStoreAt(t, tlsEnv, cfg)
		rec := newTimedRecorder()
		_, err := s.Head(objstore.WithObserver(ctx, rec), "any", "k")
		var cv *tls.CertificateVerificationError
		if !errors.As(err, &cv) {
			t.Fatalf("head: %v, want a certificate verification error", err)
		}
		if len(rec.requests["HeadObject"]) != 1 || len(rec.retries) != 0 {
			t.Fatalf("requests %v, retries %v: an untrusted certificate is a definite answer, not retried", rec.requests, rec.retries)
		}
		t.Logf("refused: %v", err)
	}

	t.Run("with the CA", func(t *testing.T) { works(t, objstore.S3Config{CAFile: caFile}) })
	t.Run("system roots", func(t *testing.T) { refused(t, objstore.S3Config{}) })
	t.Run("another CA", func(t *testing.T) { refused(t, objstore.S3Config{CAFile: otherFile}) })
	t.Run("AWS_CA_BUNDLE", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", caFile)
		works(t, objstore.S3Config{})
	})
	t.Run("CAFile over AWS_CA_BUNDLE", func(t *testing.T) {
		t.Setenv("AWS_CA_BUNDLE", caFile)
		refused(t, objstore.S3Config{CAFile: otherFile})
		t.Setenv("AWS_CA_BUNDLE", otherFile)
		works(t, objstore.S3Config{CAFile: caFile})
	})
	t.Run("unusable files", func(t *testing.T) {
		dir := t.TempDir()
		_, keyPEM := ca.Issue(t, "127.0.0.1")
		garbled := append([]byte(nil), ca.PEM()...)
		garbled[len(garbled)/2] ^= 0x55
		for name, content := range map[string][]byte{"empty": nil, "not PEM": []byte("hello"), "a key": keyPEM, "garbled": garbled} {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, content, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := New(ctx, overDefaults(objstore.S3Config{Endpoint: tlsEnv.Endpoint, CAFile: p})); !errors.Is(err, ErrCAFile) {
				t.Errorf("%s: %v, want ErrCAFile", name, err)
			}
		}
		if _, err := New(ctx, overDefaults(objstore.S3Config{Endpoint: tlsEnv.Endpoint, CAFile: filepath.Join(dir, "missing")})); !errors.Is(err, ErrCAFile) || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("missing file: %v, want ErrCAFile and the file's error", err)
		}
	})
}
