package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/sim"
)

// Helpers for tests that run real `auditor serve` processes.

// binDir holds the auditor binary built once for the package's tests.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "auditor-test-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binBuild builds one binary once per test binary.
type binBuild struct {
	sync.Once
	path string
	err  error
}

func (b *binBuild) get(t *testing.T, name, pkg string) string {
	t.Helper()
	b.Do(func() {
		path := filepath.Join(binDir, name)
		cmd := exec.Command("go", "build", "-o", path, pkg)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			return
		}
		b.path = path
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

var auditorBuild, novasimBuild binBuild

// auditorBinary builds ./cmd/auditor once per test binary.
func auditorBinary(t *testing.T) string { return auditorBuild.get(t, "auditor", ".") }

// novasimBinary builds ./cmd/novasim once per test binary.
func novasimBinary(t *testing.T) string { return novasimBuild.get(t, "novasim", "../novasim") }

// migratedDB is a fresh, migrated database with star s1.
func migratedDB(t *testing.T) (string, *catalog.DB) {
	t.Helper()
	url, db := migratedDBNoStar(t)
	if err := writepath.New(db).CreateStar(context.Background(), "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	return url, db
}

// migratedDBNoStar is a fresh migrated database without the star.
func migratedDBNoStar(t *testing.T) (string, *catalog.DB) {
	t.Helper()
	url := testenv.FreshDatabase(t)
	if code, out, errs := runCLI(t, "migrate", "--database-url", url); code != 0 {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	db, err := catalog.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return url, db
}

// proc is a running `auditor serve`.
type proc struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	err  error
	out  *lineLog
}

// startServe starts `auditor serve` for star s1 with a fast lease (2s,
// renewed every 500ms), an hourly schedule and HTTP on a free port, and
// waits until it listens. Flags in extra override these (the last wins).
func startServe(t *testing.T, name, dbURL string, extra ...string) *proc {
	t.Helper()
	return startServeWith(t, name, dbURL, serveOptions{}, extra...)
}

// serveOptions adjust startServeWith.
type serveOptions struct {
	env   []string // added to the process's environment
	quiet bool     // keep the output (proc.out) without copying it to the test log
	fleet bool     // a fleet member: no --star (extra says --stars)
}

// startServeWith is startServe with options.
func startServeWith(t *testing.T, name, dbURL string, o serveOptions, extra ...string) *proc {
	t.Helper()
	args := []string{"serve", "--star", "s1", "--database-url", dbURL, "--holder", name,
		"--http-addr", "127.0.0.1:0", "--lease-ttl", "2s", "--lease-renew", "500ms", "--schedule", "@every 1h",
		"--log-format", "json", "--log-level", "debug", "--data-dir", t.TempDir()}
	if o.fleet {
		args = append(args[:1], args[3:]...)
	}
	if !slices.Contains(extra, "--s3-endpoint") {
		args = append(args, "--fs-root", t.TempDir())
	}
	cmd := exec.Command(auditorBinary(t), append(args, extra...)...)
	cmd.Env = append(os.Environ(), o.env...)
	out := &lineLog{t: t, name: name, addr: make(chan string, 1), quiet: o.quiet}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, name: name, cmd: cmd, done: make(chan struct{}), out: out}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		out.close()
	})
	select {
	case p.addr = <-out.addr:
	case <-p.done:
		t.Fatalf("%s exited before listening: %v\n%s", name, p.err, strings.Join(out.lines(), "\n"))
	case <-time.After(30 * time.Second): // serve's start checks come first: on a loaded machine, many seconds
		t.Fatalf("%s does not listen", name)
	}
	return p
}

func (p *proc) signal(s os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatalf("signal %s: %v", p.name, err)
	}
}

// kill9 kills the process without letting it release anything.
func (p *proc) kill9() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	<-p.done
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the exit and returns the exit code.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %s", p.name, within)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatalf("%s: %v", p.name, p.err)
	}
	return 0
}

func (p *proc) get(path string) (int, string) {
	p.t.Helper()
	return httpGet(p.t, "http://"+p.addr+path)
}

// metrics scrapes /metrics and parses it with the Prometheus text parser.
func (p *proc) metrics() map[string]*dto.MetricFamily {
	p.t.Helper()
	code, body := p.get("/metrics")
	if code != http.StatusOK {
		p.t.Fatalf("%s /metrics: %d", p.name, code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("%s /metrics does not parse: %v", p.name, err)
	}
	return fams
}

// value sums the samples of a family whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	var sum float64
	for _, m := range f.GetMetric() {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func (p *proc) gauge(name string) float64 {
	p.t.Helper()
	return value(p.metrics(), name, map[string]string{"star": "s1"})
}

// processGauge is the value of a series of the process, not of a star (a
// fleet member's own, the Go runtime's); -1 when it has none.
func (p *proc) processGauge(name string) float64 {
	p.t.Helper()
	return value(p.metrics(), name, nil)
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// lineLog copies a process's output into the test log (unless quiet) and
// finds the HTTP address in its "http listening" line.
type lineLog struct {
	t      *testing.T
	name   string
	quiet  bool
	mu     sync.Mutex
	buf    bytes.Buffer
	all    strings.Builder
	addr   chan string
	closed bool
}

func (l *lineLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.Write(b)
	for {
		line, err := l.buf.ReadString('\n')
		if err != nil {
			l.buf.WriteString(line)
			break
		}
		line = strings.TrimRight(line, "\n")
		l.all.WriteString(line + "\n")
		if !l.closed && !l.quiet {
			l.t.Logf("%s: %s", l.name, line)
		}
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "http listening" {
			select {
			case l.addr <- rec.Addr:
			default:
			}
		}
	}
	return len(b), nil
}

func (l *lineLog) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
}

// lines returns every line so far.
func (l *lineLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.SplitAfter(strings.TrimSuffix(l.all.String(), "\n"), "\n")
}

func (l *lineLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.all.String(), s)
}

// eventually polls cond every 50ms until it holds or the time is up.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

func currentLease(t *testing.T, db *catalog.DB) (catalog.Lease, bool) {
	t.Helper()
	l, live, err := db.Leases().CurrentLease(context.Background(), "s1")
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		t.Fatal(err)
	}
	return l, live
}

// tcpProxy forwards to a TCP address until cut: then it drops every open
// connection and refuses new ones, like a database that went away.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func newProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(u, c)
		go pipe(c, u)
	}
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// via rewrites a database URL to go through the proxy.
func (p *tcpProxy) via(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.ln.Addr().String()
	return u.String()
}

// dbHostPort is host:port of a database URL.
func dbHostPort(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "5432")
	}
	return u.Host
}

// writtenFileStar is a fresh migrated database with star s1 of streams
// streams (content seeded by seed) and flights flights of 32 KiB written by
// the write path to a file store (bucket nova) under root.
func writtenFileStar(t *testing.T, streams int, seed uint64, flights int64) (url string, db *catalog.DB, fs *filestore.Store, root string) {
	t.Helper()
	ctx := context.Background()
	url, db = migratedDBNoStar(t)
	root = t.TempDir()
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: streams, Content: sim.DefaultContent(seed)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: fs, Standard: "nova"}, sim.WriteOptions{Star: "s1", Flights: flights,
		FlightBytes: 32 << 10, FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return url, db, fs, root
}
