package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// EnvPostgresBin names the directory of the Postgres server binaries
// (initdb, pg_ctl) for tests that run a cluster of their own; unset, the
// newest /usr/lib/postgresql/*/bin.
const EnvPostgresBin = "NOVA_TEST_PG_BIN"

// postgresBin is the directory of initdb and pg_ctl. Without one the test
// skips, whether or not services are required: the services
// (scripts/services.sh) are a Postgres to connect to, which may run
// elsewhere, not its server binaries.
func postgresBin(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvPostgresBin)
	if dir == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		sort.Slice(found, func(i, j int) bool { return pgMajor(found[i]) < pgMajor(found[j]) })
		if len(found) > 0 {
			dir = found[len(found)-1]
		}
	}
	for _, b := range []string{"initdb", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); dir == "" || err != nil {
			t.Skipf("no Postgres server binaries (initdb, pg_ctl) in /usr/lib/postgresql/*/bin or $%s: "+
				"this test runs a cluster of its own (apt-get install postgresql)", EnvPostgresBin)
		}
	}
	return dir
}

// pgMajor is the major version in /usr/lib/postgresql/<major>/bin.
func pgMajor(bin string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(bin)))
	return n
}

// StartTLSPostgres starts a throwaway Postgres cluster of the test's own
// on a free loopback port (127.0.0.1) that accepts TLS connections only
// (pg_hba.conf: hostssl, trust, user postgres), presenting the server
// certificate and key given as PEM (CA.Issue). It returns the port; the
// cluster is stopped and removed when the test ends. Run as root, the
// cluster runs as the user postgres (initdb refuses root). It skips
// without the server binaries (postgresBin).
func StartTLSPostgres(t testing.TB, certPEM, keyPEM []byte) int {
	t.Helper()
	bin := postgresBin(t)
	dir, err := os.MkdirTemp("", "nova-pgtls-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var as []string // the command prefix that runs as the cluster's owner
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and there is no user postgres to run the cluster as: %v", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		as = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(name string, args ...string) {
		t.Helper()
		argv := append(append(append([]string{}, as...), filepath.Join(bin, name)), args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out.String())
		}
	}
	data := filepath.Join(dir, "data")
	run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
	write := func(name string, b []byte, mode os.FileMode) {
		t.Helper()
		p := filepath.Join(data, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if uid >= 0 {
			if err := os.Chown(p, uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("server.crt", certPEM, 0o644)
	write("server.key", keyPEM, 0o600)
	// TLS only: no host line, so a connection without TLS finds no entry
	write("pg_hba.conf", []byte("local all all trust\nhostssl all all 127.0.0.1/32 trust\n"), 0o600)
	var last error
	for range 3 { // the free port may be taken before the server binds it
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"+
			"ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nfsync = off\n", port, dir)
		write("postgresql.auto.conf", []byte(conf), 0o600)
		argv := append(append(append([]string{}, as...), filepath.Join(bin, "pg_ctl")),
			"-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "30", "start")
		cmd := exec.Command(argv[0], argv[1:]...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Cleanup(func() {
				argv := append(append(append([]string{}, as...), filepath.Join(bin, "pg_ctl")), "-D", data, "-m", "immediate", "-w", "stop")
				if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
					t.Logf("stop the TLS Postgres: %v\n%s", err, out)
				}
			})
			return port
		}
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		last = fmt.Errorf("%v\n%s\n%s", err, out, log)
	}
	t.Fatalf("the TLS Postgres did not start: %v", last)
	return 0
}
