package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts a CPU profile of this process written to path
// (`run --once --cpuprofile FILE`): a one-shot run ends before anyone could
// fetch /debug/pprof/profile from the admin port, so the profile of one
// cycle is taken in-process. The returned stop ends the profile and closes
// the file; it must run before the process exits, else the file is empty.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("cpu profile %s: %w", path, err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("cpu profile %s: %w", path, err)
		}
		return nil
	}, nil
}
