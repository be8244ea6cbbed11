package main

import (
	"net/http"
	"testing"
)

// TestServePprofFlag: /debug/pprof/ is off by default and served with
// --pprof (or NOVA_AUDITOR_PPROF).
func TestServePprofFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	url, _ := migratedDB(t)
	off := startServe(t, "off", url)
	if code, _ := off.get("/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("pprof without --pprof: %d, want 404", code)
	}
	if code, _ := off.get("/metrics"); code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	on := startServe(t, "on", url, "--pprof=true")
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=1", "/debug/pprof/heap?debug=1"} {
		if code, body := on.get(path); code != http.StatusOK {
			t.Fatalf("GET %s with --pprof: %d %.100q", path, code, body)
		}
	}
	t.Setenv("NOVA_AUDITOR_PPROF", "true")
	env := startServe(t, "env", url)
	if code, _ := env.get("/debug/pprof/"); code != http.StatusOK {
		t.Fatalf("pprof with NOVA_AUDITOR_PPROF=true: %d", code)
	}
}
