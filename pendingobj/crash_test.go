package pendingobj

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const crashPosition = 42

// crashObjects are one object on each of Install's write paths.
var crashObjects = map[string][]byte{
	"small": randomBytes(3000, 42),
	"large": randomBytes(largeObject+3000, 43),
}

// installSteps counts the numbered steps of an uninterrupted install.
func installSteps(t *testing.T, crashObject []byte) []string {
	fsys := &faultFS{}
	s, _ := newTestStore(t, fsys)
	if err := s.Install(crashPosition, "part#1", "application/octet-stream", crashObject); err != nil {
		t.Fatal(err)
	}
	return fsys.log
}

// crashSetup returns a directory holding an unrelated file and, with stale,
// a torn temporary file of the position left by an earlier crash.
func crashSetup(t *testing.T, stale bool) string {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "unrelated.txt"), []byte("keep"))
	if stale {
		writeFile(t, filepath.Join(dir, "ns-42.pending-object.tmp"), []byte("KSPENDING01\n torn"))
	}
	return dir
}

// checkRecoverable asserts what Install promises after any failure or
// crash: the position holds nothing, a temporary file Reconcile removes, or
// a complete, valid final file, never a torn final file; a successful
// Install's final file survives; and a fresh store recovers.
func checkRecoverable(t *testing.T, dir string, crashObject []byte, succeeded bool) {
	t.Helper()
	s, err := New(dir, "ns", "fmt/1")
	if err != nil {
		t.Fatal(err)
	}
	final, temp := false, false
	for _, name := range dirNames(t, dir) {
		switch name {
		case "ns-42.pending-object":
			final = true
		case "ns-42.pending-object.tmp":
			temp = true
		case "unrelated.txt":
			if string(readFile(t, filepath.Join(dir, name))) != "keep" {
				t.Fatal("unrelated file changed")
			}
		default:
			t.Fatalf("unexpected file %s", name)
		}
	}
	if succeeded && !final {
		t.Fatal("Install succeeded but its final file is gone")
	}
	if final {
		obj, err := s.Read(crashPosition)
		if err != nil {
			t.Fatalf("final file present but invalid: %v", err)
		}
		if !bytes.Equal(obj.Bytes, crashObject) || obj.FileName != "part#1" {
			t.Fatal("final file holds other bytes")
		}
	}
	var referenced []uint64
	if final {
		referenced = []uint64{crashPosition}
	}
	if err := s.Reconcile(referenced); err != nil {
		t.Fatalf("Reconcile after the crash: %v", err)
	}
	if _, err := os.Lstat(s.path(crashPosition, true)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("temporary file survived Reconcile (present before: %v)", temp)
	}
	if !final {
		if err := s.Install(crashPosition, "part#1", "application/octet-stream", crashObject); err != nil {
			t.Fatalf("re-install after the crash: %v", err)
		}
		if _, err := s.Read(crashPosition); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInstallCrashAtEveryStep kills the process (simulated) at every step of
// Install, with and without a stale temporary file, then applies every
// power-loss outcome the disk allows: any possible subset of the directory
// changes not yet synced is lost (see possibleLoss), and unsynced file data
// is kept or torn in half.
func TestInstallCrashAtEveryStep(t *testing.T) {
	for size, crashObject := range crashObjects {
		t.Run(size, func(t *testing.T) { testInstallCrashAtEveryStep(t, crashObject) })
	}
}

func testInstallCrashAtEveryStep(t *testing.T, crashObject []byte) {
	steps := installSteps(t, crashObject)
	scenarios := 0
	for _, stale := range []bool{false, true} {
		for k := 1; k <= len(steps)+1; k++ { // len+1: no crash
			for undo := uint(0); ; undo++ {
				var dirOps int
				for _, torn := range []bool{false, true} {
					name := fmt.Sprintf("stale=%v/crash@%d", stale, k)
					if k <= len(steps) {
						name += "(" + steps[k-1] + ")"
					}
					name += fmt.Sprintf("/undo=%b/torn=%v", undo, torn)
					dir := crashSetup(t, stale)
					fsys := &faultFS{failAt: k, crash: true}
					s, err := newStore(dir, "ns", "fmt/1", fsys)
					if err != nil {
						t.Fatal(err)
					}
					err = s.Install(crashPosition, "part#1", "application/octet-stream", crashObject)
					if (k <= len(steps)) != errors.Is(err, errCrashed) || k > len(steps) && err != nil {
						t.Fatalf("%s: Install = %v", name, err)
					}
					dirOps = len(fsys.dirOps)
					if undo >= 1<<dirOps || !fsys.possibleLoss(undo) {
						break
					}
					fsys.powerLoss(t, undo, torn)
					t.Run(name, func(t *testing.T) { checkRecoverable(t, dir, crashObject, err == nil) })
					scenarios++
				}
				if undo+1 >= 1<<dirOps {
					break
				}
			}
		}
	}
	t.Logf("%d install steps, %d crash scenarios", len(steps), scenarios)
}

// TestInstallFailureAtEveryStep fails each step once with an error (the
// process lives on and Install cleans up): Install reports the fault, and
// leaves nothing, a stale temporary file, or a complete final file.
func TestInstallFailureAtEveryStep(t *testing.T) {
	for size, crashObject := range crashObjects {
		t.Run(size, func(t *testing.T) { testInstallFailureAtEveryStep(t, crashObject) })
	}
}

func testInstallFailureAtEveryStep(t *testing.T, crashObject []byte) {
	steps := installSteps(t, crashObject)
	link := -1
	for i, op := range steps {
		if strings.HasPrefix(op, "link") {
			link = i + 1
		}
	}
	for _, stale := range []bool{false, true} {
		for k := 1; k <= len(steps); k++ {
			t.Run(fmt.Sprintf("stale=%v/fail@%d(%s)", stale, k, steps[k-1]), func(t *testing.T) {
				dir := crashSetup(t, stale)
				fsys := &faultFS{failAt: k}
				s, err := newStore(dir, "ns", "fmt/1", fsys)
				if err != nil {
					t.Fatal(err)
				}
				err = s.Install(crashPosition, "part#1", "application/octet-stream", crashObject)
				if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "position 42") {
					t.Fatalf("Install = %v, want the injected fault naming the position", err)
				}
				_, ferr := os.Lstat(s.Path(crashPosition))
				if final := ferr == nil; final != (k > link) {
					t.Fatalf("final present = %v after a fault at step %d (link is %d)", final, k, link)
				}
				// Faults while writing the temporary file are cleaned up.
				if op := strings.Fields(steps[k-1])[0]; slices.Contains([]string{"create", "write", "writeat", "sync", "close", "link"}, op) {
					if _, err := os.Lstat(s.path(crashPosition, true)); !errors.Is(err, fs.ErrNotExist) {
						t.Fatalf("temporary file left after a %s fault", op)
					}
				}
				checkRecoverable(t, dir, crashObject, false)
			})
		}
	}
}
