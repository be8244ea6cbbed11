package testenv

import (
	"crypto/tls"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a server that can be switched to a
// blackhole: it keeps accepting and reading, and forwards nothing either
// way, as a network path that silently drops packets does. Connections
// stay open, so a client learns of it only from its own deadlines.
type Proxy struct {
	ln     net.Listener
	target string
	black  atomic.Bool
	delay  atomic.Int64 // time.Duration before each forwarded read
	mu     sync.Mutex
	conns  []net.Conn
	holes  []net.Conn // accepted while blackholed: never connected through
}

// NewProxy starts a proxy to target (host:port), stopped when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	return newProxy(t, target, nil)
}

// NewTLSProxy starts a proxy that terminates TLS with cfg (a server
// certificate, CA.ServerTLS) in front of target, which speaks plain TCP:
// a TLS endpoint for a server that has none.
func NewTLSProxy(t testing.TB, target string, cfg *tls.Config) *Proxy {
	t.Helper()
	return newProxy(t, target, cfg)
}

func newProxy(t testing.TB, target string, tlsCfg *tls.Config) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	p := &Proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is rawURL (a database or service URL) pointed at the proxy instead.
func (p *Proxy) URL(t testing.TB, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatalf("proxy: parse %q: %v", rawURL, err)
	}
	u.Host = p.Addr()
	return u.String()
}

// Blackhole makes every connection, open or new, drop what it carries.
func (p *Proxy) Blackhole() { p.black.Store(true) }

// Restore forwards again. Bytes dropped meanwhile stay lost, and the
// connections accepted meanwhile are closed (they never reached the server).
func (p *Proxy) Restore() {
	p.black.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.holes {
		_ = c.Close()
	}
	p.holes = nil
}

// Cut stops the proxy for good: it stops listening (a new connection is
// refused) and closes every connection, so the server sees its clients
// vanish as when their process is killed (Postgres rolls back what they
// had open).
func (p *Proxy) Cut() { p.close() }

// Delay holds every forwarded read for d (0: none), as a slow network does.
func (p *Proxy) Delay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	if p.black.Load() {
		p.mu.Lock()
		p.holes = append(p.holes, c)
		p.mu.Unlock()
		p.pump(c, nil) // accept, never forward
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.track(s)
	go p.pump(s, c)
	p.pump(c, s)
}

// pump copies src to dst (discarding while blackholed, or when dst is nil)
// until src fails; then it closes both.
func (p *Proxy) pump(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if d := time.Duration(p.delay.Load()); n > 0 && d > 0 {
			time.Sleep(d)
		}
		if n > 0 && dst != nil && !p.black.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			_ = src.Close() // EOF, a reset peer or a closed proxy alike
			if dst != nil {
				_ = dst.Close()
			}
			return
		}
	}
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}
