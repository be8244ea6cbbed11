package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cli"
)

// Exit codes of every subcommand: the one table that `auditor --help`
// prints and the README and docs/operations.md repeat
// (TestExitCodesMatchTheDocsAndHelp).
const (
	exitOK      = cli.ExitOK
	exitFailure = cli.ExitFailure
	exitUsage   = cli.ExitUsage
	// exitFindings is verify's code when the catalog is not sound, the
	// code inspect gives a corrupt object, doctor's when a check failed
	// and serve's when a start check did.
	exitFindings = 3
	// exitUnsupported is inspect's code for an object of a format version
	// this build does not read.
	exitUnsupported = 4
	// exitUnreachable is verify's code when it could not read the store
	// (credentials, access, transport): nothing was judged corrupt;
	// doctor's when no bucket could be reached.
	exitUnreachable = 5
	// exitRewound is the code of a command that found the metastore behind
	// the object store (a restore from backup, a failover that lost
	// commits): the star is halted until auditor reconcile has run.
	exitRewound = 6
	// exitTimeout is the code of a wait (trigger --wait, erase --wait)
	// that --timeout ended first: what was asked stays recorded and is
	// still carried out.
	exitTimeout = 7
)

var exitCodes = []struct {
	code    int
	meaning string
}{
	{exitOK, "success: the command did what it was asked (verify, inspect: sound)"},
	{exitFailure, "runtime failure (a failed cycle, a held lease, an I/O error)"},
	{exitUsage, "usage or configuration error, unknown star or stream, schema behind or ahead of the binary"},
	{exitFindings, "verify: findings in the catalog (or, with --strays, strays in the store); inspect: a corrupt object (checksum mismatch included); doctor: a check failed; serve: a start check failed, it refused to start"},
	{exitUnsupported, "inspect: an unsupported format version"},
	{exitUnreachable, "a dependency could not be reached, nothing was done: the database did not answer (connection refused at the network level, timeout; serve waits for it instead); verify, reconcile: the store could not be read (credentials, access, transport), nothing was judged; doctor: the database or no bucket could be reached"},
	{exitRewound, "run: the metastore is behind the object store (restored from backup, or failed over to a replica that lost commits); the star is halted (metastore_rewound) until auditor reconcile --apply"},
	{exitTimeout, "trigger --wait, erase --wait: --timeout ran out before the cycle finished or the erasure was applied; the request stays recorded and is still carried out"},
}

// inspectExitCode maps a validation error to the exit code of `auditor
// inspect`, by its class (bundlefmt.ClassOf): a checksum mismatch is
// corrupt; an error of no class is a runtime failure.
func inspectExitCode(err error) int {
	switch bundlefmt.ClassOf(err) {
	case bundlefmt.ClassUnsupported:
		return exitUnsupported
	case bundlefmt.ClassCorrupt, bundlefmt.ClassChecksum:
		return exitFindings
	}
	if err == nil {
		return exitOK
	}
	return exitFailure
}

// writeExitCodes prints the table for --help.
func writeExitCodes(w io.Writer) {
	fmt.Fprintln(w, "exit codes:")
	for _, c := range exitCodes {
		fmt.Fprintf(w, "  %d  %s\n", c.code, c.meaning)
	}
}

// commandExitsHelp is the exit-code lines a command's -h ends with: the
// rows of the table the command may return (command.exits), as
// `auditor --help` prints them.
func commandExitsHelp(name string) string {
	var b strings.Builder
	b.WriteString("exit codes:\n")
	for _, code := range commands()[name].exits {
		for _, c := range exitCodes {
			if c.code == code {
				fmt.Fprintf(&b, "  %d  %s\n", c.code, c.meaning)
			}
		}
	}
	return b.String()
}
