package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
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
	base := DatabaseURL(t)
	name := "nova_t_" + RandomSuffix(6)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("connect to test postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
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
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvDatabaseURL, err)
	}
	u.Path = "/" + name
	return u.String()
}

// S3Env is the real S3-compatible server (versitygw) started for the tests.
type S3Env struct {
	Endpoint  string // http://127.0.0.1:PORT, path-style, region us-east-1
	AccessKey string
	SecretKey string
	Region    string
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
	}
	if e.Endpoint == "" {
		missing(t, EnvS3Endpoint)
	}
	return e
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
// the process.
func VersitygwObjectPath(t testing.TB, bucket, key string) string {
	t.Helper()
	pid := os.Getenv(EnvVersitygwPID)
	if pid == "" {
		missing(t, EnvVersitygwPID)
	}
	raw, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatalf("versitygw's command line: %v", err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	if len(args) < 2 || args[len(args)-2] != "posix" {
		t.Fatalf("versitygw's command line %q does not end in posix DIR", args)
	}
	return filepath.Join(args[len(args)-1], bucket, filepath.FromSlash(key))
}
