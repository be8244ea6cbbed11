package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/testenv"
)

// The basic auth user of the web configurations the tests write.
const (
	webUser     = "prometheus"
	webPassword = "scrape-secret"
)

// writeWebTLS writes a server certificate for 127.0.0.1 and localhost,
// issued by a new test CA (testenv.CA), as server.pem and server-key.pem
// into dir, and returns the pool of the CA.
func writeWebTLS(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	ca := testenv.NewCA(t)
	certPEM, keyPEM := ca.Issue(t, "127.0.0.1", "localhost")
	writeFile(t, filepath.Join(dir, "server.pem"), string(certPEM))
	writeFile(t, filepath.Join(dir, "server-key.pem"), string(keyPEM))
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.PEM()) {
		t.Fatal("the test CA's certificate does not parse")
	}
	return pool
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeWebConfig writes a CA, a server certificate and web.yml into a new
// directory: HTTPS with that certificate (paths relative to the file) and
// webUser with webPassword's bcrypt hash. It returns web.yml's path and
// the CA's pool.
func writeWebConfig(t *testing.T) (string, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	pool := writeWebTLS(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(webPassword), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "web.yml")
	writeFile(t, path, "tls_server_config:\n  cert_file: server.pem\n  key_file: server-key.pem\n"+
		"basic_auth_users:\n  "+webUser+": "+string(hash)+"\n")
	return path, pool
}

// webGet GETs path at addr over HTTPS trusting only pool, with basic auth
// when user is not empty.
func webGet(t *testing.T, pool *x509.CertPool, addr, path, user, password string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET https://%s%s: %v", addr, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// checkSecuredEndpoint holds an endpoint served with writeWebConfig's file
// to it: plain HTTP gets no answer of the handler, HTTPS without
// credentials or with a wrong password 401 on every path, and with the
// right ones /metrics (the auditor's series) and /status; it returns the
// body of /status.
func checkSecuredEndpoint(t *testing.T, addr string, pool *x509.CertPool) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	if resp, err := c.Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// Go's TLS server answers a plain HTTP request with a bare 400.
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
			t.Fatalf("plain HTTP /metrics: %d %.200q, want it refused", resp.StatusCode, b)
		}
	}
	for _, path := range []string{"/metrics", "/status", "/healthz", "/readyz"} {
		if code, body := webGet(t, pool, addr, path, "", ""); code != http.StatusUnauthorized {
			t.Fatalf("HTTPS %s without credentials: %d %.200q, want 401", path, code, body)
		}
		if code, body := webGet(t, pool, addr, path, webUser, "wrong-"+webPassword); code != http.StatusUnauthorized {
			t.Fatalf("HTTPS %s with a wrong password: %d %.200q, want 401", path, code, body)
		}
		if code, body := webGet(t, pool, addr, path, "nobody", webPassword); code != http.StatusUnauthorized {
			t.Fatalf("HTTPS %s as an unknown user: %d %.200q, want 401", path, code, body)
		}
	}
	code, body := webGet(t, pool, addr, "/metrics", webUser, webPassword)
	if code != http.StatusOK || !strings.Contains(body, "nova_auditor_") {
		t.Fatalf("HTTPS /metrics with credentials: %d %.300q", code, body)
	}
	if code, body := webGet(t, pool, addr, "/healthz", webUser, webPassword); code != http.StatusOK {
		t.Fatalf("HTTPS /healthz with credentials: %d %.300q", code, body)
	}
	code, body = webGet(t, pool, addr, "/status", webUser, webPassword)
	if code != http.StatusOK || !json.Valid([]byte(body)) {
		t.Fatalf("HTTPS /status with credentials: %d %.300q", code, body)
	}
	return body
}

// TestServeWebConfigTLSAndBasicAuth: with --web-config-file, serve's
// endpoint is HTTPS with the file's certificate (a client trusting its CA
// connects) and asks every request for the file's basic auth users;
// without it (the other tests), plain HTTP as before.
func TestServeWebConfigTLSAndBasicAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	url, _ := migratedDB(t)
	path, pool := writeWebConfig(t)
	p := startServe(t, "tls", url, "--web-config-file", path)
	body := checkSecuredEndpoint(t, p.addr, pool)
	var st daemon.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.Star != "s1" {
		t.Fatalf("/status: %v %.300q", err, body)
	}
}

// TestFleetMemberWebConfigTLSAndBasicAuth: a fleet member's endpoint
// takes --web-config-file as serve's for one star does.
func TestFleetMemberWebConfigTLSAndBasicAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	url, _ := migratedDB(t)
	path, pool := writeWebConfig(t)
	t.Setenv("NOVA_AUDITOR_WEB_CONFIG_FILE", path) // the environment, as a Kubernetes manifest would set it
	p := startServeWith(t, "member", url, serveOptions{fleet: true}, "--stars", "all", "--start-checks=false")
	checkSecuredEndpoint(t, p.addr, pool)
}

// TestServeRefusesABadWebConfig: a web configuration file that does not
// parse, names a certificate that is not there, or holds a password that
// is not a bcrypt hash stops serve (one star, or a fleet member) at start
// with exit 2, naming web-config-file and the cause, before it listens.
func TestServeRefusesABadWebConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeWebTLS(t, dir)
	files := map[string]string{
		"broken.yml":       "tls_server_config: [cert_file\n",
		"unknown-key.yml":  "tls_server_config:\n  certificate_file: server.pem\n",
		"missing-cert.yml": "tls_server_config:\n  cert_file: no-such.pem\n  key_file: server-key.pem\n",
		"missing-key.yml":  "tls_server_config:\n  cert_file: server.pem\n",
		"plain-pw.yml":     "basic_auth_users:\n  " + webUser + ": " + webPassword + "\n",
	}
	for name, content := range files {
		writeFile(t, filepath.Join(dir, name), content)
	}
	cases := []struct {
		file  string
		fleet bool
		cause string // what stderr must say besides web-config-file
	}{
		{"broken.yml", false, "yaml:"},
		{"unknown-key.yml", false, "certificate_file"},
		{"missing-cert.yml", false, "no-such.pem"},
		{"missing-key.yml", false, "key_file"},
		{"plain-pw.yml", false, "bcrypt"},
		{"no-such-web.yml", false, "no such file"},
		{"missing-cert.yml", true, "no-such.pem"},
		{"broken.yml", true, "yaml:"},
	}
	for _, tc := range cases {
		name := tc.file
		if tc.fleet {
			name = "fleet " + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A database nothing listens at: serve would wait for it, not
			// exit, were the file not checked at start.
			args := []string{"serve", "--database-url", closedPortURL, "--http-addr", "127.0.0.1:0",
				"--fs-root", t.TempDir(), "--data-dir", t.TempDir(), "--log-format", "json",
				"--web-config-file", filepath.Join(dir, tc.file)}
			if tc.fleet {
				args = append(args, "--stars", "all")
			} else {
				args = append(args, "--star", "s1")
			}
			cmd := exec.Command(auditorBinary(t), args...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				_ = cmd.Wait() // a nonzero exit is the point: its code is checked below
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("serve with %s did not exit: %s", tc.file, stderr.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != exitUsage {
				t.Fatalf("serve with %s: exit %d, want %d: %s", tc.file, code, exitUsage, stderr.String())
			}
			out := stderr.String()
			if !strings.Contains(out, "web-config-file") || !strings.Contains(strings.ToLower(out), strings.ToLower(tc.cause)) {
				t.Fatalf("serve with %s: stderr %q does not name web-config-file and %q", tc.file, out, tc.cause)
			}
			if strings.Contains(out, "http listening") {
				t.Fatalf("serve with %s listened: %s", tc.file, out)
			}
		})
	}
}
