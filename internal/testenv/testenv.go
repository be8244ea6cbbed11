package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
)

// Environment variables written by scripts/services.sh.
const (
	EnvDatabaseURL     = "NOVA_TEST_DATABASE_URL"
	EnvS3Endpoint      = "NOVA_TEST_S3_ENDPOINT"
	EnvS3AccessKey     = "NOVA_TEST_S3_ACCESS_KEY"
	EnvS3SecretKey     = "NOVA_TEST_S3_SECRET_KEY"
	EnvS3Server        = "NOVA_TEST_S3_SERVER"
	EnvVersitygwPID    = "NOVA_TEST_VERSITYGW_PID"
	EnvRequireServices = "NOVA_TEST_REQUIRE_SERVICES"
)

// missing skips the test, or fails it when services are required.
func missing(t testing.TB, what string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not set: run the tests with `make test` (scripts/services.sh up starts the services)", what)
	if os.Getenv(EnvRequireServices) == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// DatabaseURL returns the URL of the test Postgres server's maintenance
// database, skipping (or failing, when services are required) without one.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvDatabaseURL)
	if u == "" {
		missing(t, EnvDatabaseURL)
	}
	return u
}

// RandomSuffix returns n random bytes as lowercase hex.
func RandomSuffix(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b)
}

// FreshDatabase creates an empty database with a unique name on the test
// server and returns its URL; the database is dropped when the test ends, so
// tests run in parallel and leave nothing behind.
func FreshDatabase(t testing.TB) string {
	t.Helper()
	return createDatabase(t, "")
}

// FreshDatabaseDroppable is FreshDatabase with a function that drops the
// database at once (as CloneDatabaseDroppable).
func FreshDatabaseDroppable(t testing.TB) (string, func()) {
	t.Helper()
	return makeDatabase(t, "")
}

// CloneDatabase creates a database with a unique name as a copy of the one
// at url (CREATE DATABASE ... TEMPLATE: nothing may be connected to it
// meanwhile) and returns its URL; it is dropped when the test ends. Grants
// on the database itself (CONNECT, CREATE) are not copied: a new database
// has the defaults.
func CloneDatabase(t testing.TB, url string) string {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return createDatabase(t, strings.TrimPrefix(u.Path, "/"))
}

// CloneDatabaseDroppable is CloneDatabase with a function that drops the
// clone at once: a long test making many databases drops each one when it
// is done with it (the end of the test drops what is left).
func CloneDatabaseDroppable(t testing.TB, url string) (string, func()) {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return makeDatabase(t, strings.TrimPrefix(u.Path, "/"))
}

// createDatabase creates a database on the test server, from the template
// when one is named, and drops it when the test ends.
func createDatabase(t testing.TB, template string) string {
	t.Helper()
	url, _ := makeDatabase(t, template)
	return url
}

// makeDatabase is createDatabase that also returns the drop.
func makeDatabase(t testing.TB, template string) (string, func()) {
	t.Helper()
	base := DatabaseURL(t)
	name := "nova_t_" + RandomSuffix(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to test postgres: %v", err)
	}
	defer conn.Close(ctx)
	stmt := "CREATE DATABASE " + name
	if template != "" {
		stmt += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	if _, err := conn.Exec(ctx, stmt); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	var once sync.Once
	drop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := pgx.Connect(ctx, base)
			if err != nil {
				t.Logf("drop database %s: %v", name, err)
				return
			}
			defer c.Close(ctx)
			if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
				t.Logf("drop database %s: %v", name, err)
			}
		})
	}
	t.Cleanup(drop)
	u, err := neturl.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvDatabaseURL, err)
	}
	u.Path = "/" + name
	return u.String(), drop
}

// The S3 servers scripts/services.sh starts for the tests
// (NOVA_TEST_S3_SERVER): versitygw for make test, SeaweedFS for make
// test-compat.
const (
	ServerVersitygw = "versitygw"
	ServerSeaweedFS = "seaweedfs"
)

// S3Env is the real S3-compatible server started for the tests.
type S3Env struct {
	Endpoint  string // http://127.0.0.1:PORT, path-style, region us-east-1
	AccessKey string
	SecretKey string
	Region    string
	// Server is which server it is (ServerVersitygw, ServerSeaweedFS): an
	// env file that does not say is versitygw's.
	Server string
}

// S3 returns the test S3 server, skipping (or failing, when services are
// required) without one. Each test should create its own bucket (a name from
// BucketName) through the S3 API.
func S3(t testing.TB) S3Env {
	t.Helper()
	e := S3Env{
		Endpoint:  os.Getenv(EnvS3Endpoint),
		AccessKey: os.Getenv(EnvS3AccessKey),
		SecretKey: os.Getenv(EnvS3SecretKey),
		Region:    "us-east-1",
		Server:    os.Getenv(EnvS3Server),
	}
	if e.Endpoint == "" {
		missing(t, EnvS3Endpoint)
	}
	if e.Server == "" {
		e.Server = ServerVersitygw
	}
	return e
}

// RequireVersitygw skips the test, saying why, when the test S3 server is
// not versitygw: the test reaches into versitygw itself (its process, its
// posix backend, a versitygw of its own) or asserts what versitygw 1.8.0
// does where servers differ. It skips (or fails, when services are
// required) without a test server, as S3 does.
func RequireVersitygw(t testing.TB, why string) {
	t.Helper()
	if s := S3(t).Server; s != ServerVersitygw {
		t.Skipf("versitygw only: %s; the test S3 server is %s", why, s)
	}
}

// BucketName returns a unique, valid bucket name with the given short prefix.
func BucketName(prefix string) string {
	return prefix + "-" + RandomSuffix(5)
}

// MigratedDB is FreshDatabase opened through the catalog with every
// migration applied; it returns the handle (closed when the test ends) and
// the database's URL (for subprocesses and direct connections).
func MigratedDB(t testing.TB) (*catalog.DB, string) {
	t.Helper()
	url := FreshDatabase(t)
	ctx := context.Background()
	db, err := catalog.Open(ctx, url)
	if err != nil {
		t.Fatalf("open the test database: %v", err)
	}
	t.Cleanup(db.Close)
	if _, err := db.Migrate(ctx); err != nil {
		t.Fatalf("migrate the test database: %v", err)
	}
	return db, url
}

// Conn is a direct connection to the database at url (closed when the test
// ends), for tests that set up or damage rows the catalog has no call for.
func Conn(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// VersitygwObjectPath is the file that holds bucket/key on the test
// versitygw's posix backend (its data directory is the last argument of
// the process scripts/services.sh started), for tests that damage an
// object at rest. It skips, or fails when services are required, without
// the process, and skips on another server (RequireVersitygw).
func VersitygwObjectPath(t testing.TB, bucket, key string) string {
	t.Helper()
	RequireVersitygw(t, "the test damages an object on versitygw's posix backend")
	args := versitygwArgs(t)
	if len(args) < 2 || args[len(args)-2] != "posix" {
		t.Fatalf("versitygw's command line %q does not end in posix DIR", args)
	}
	return filepath.Join(args[len(args)-1], bucket, filepath.FromSlash(key))
}

// versitygwArgs is the command line of the test versitygw that
// scripts/services.sh started (NOVA_TEST_VERSITYGW_PID), read from /proc.
// It skips, or fails when services are required, without the process.
func versitygwArgs(t testing.TB) []string {
	t.Helper()
	pid := os.Getenv(EnvVersitygwPID)
	if pid == "" {
		missing(t, EnvVersitygwPID)
	}
	raw, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatalf("versitygw's command line: %v", err)
	}
	return strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
}

// StartVersitygw starts a versitygw of the test's own: the binary the test
// server runs, with its access keys, the posix backend in a temporary
// directory with posixFlags before it (for example --versioning-dir DIR),
// on a free loopback port. It is stopped when the test ends. It skips, or
// fails when services are required, without the test server, and skips
// when the test server is not versitygw (RequireVersitygw).
func StartVersitygw(t testing.TB, posixFlags ...string) S3Env {
	t.Helper()
	RequireVersitygw(t, "the test starts a versitygw of its own")
	env := S3(t)
	bin := versitygwArgs(t)[0]
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("the versitygw binary of the test server: %v", err)
	}
	var last error
	for range 3 { // the free port may be taken before versitygw binds it
		port, err := freePort()
		if err != nil {
			t.Fatalf("a free port for versitygw: %v", err)
		}
		addr := "127.0.0.1:" + strconv.Itoa(port)
		args := append([]string{"-q", "--access", env.AccessKey, "--secret", env.SecretKey, "--port", addr, "posix"}, posixFlags...)
		cmd := exec.Command(bin, append(args, t.TempDir())...)
		// The root account is the one of --access and --secret, never one
		// from the environment.
		cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY=", "ROOT_SECRET_KEY=")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start versitygw: %v", err)
		}
		exited := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(exited)
		}()
		if last = waitListening(addr, exited, 10*time.Second); last == nil {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			env.Endpoint = "http://" + addr
			return env
		}
		_ = cmd.Process.Kill()
		<-exited
		last = fmt.Errorf("%w (%s); its output: %s", last, cmd.ProcessState, out.String())
	}
	t.Fatalf("versitygw did not start: %v", last)
	return env
}

// freePort is a loopback TCP port nothing listened on a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until addr accepts a connection, the process exits,
// or the time is up.
func waitListening(addr string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("versitygw exited")
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("versitygw does not listen on %s after %s", addr, within)
}
