package main

import (
	"fmt"
	"strings"

	"github.com/nova/auditor/daemon"
)

// Exit codes of `auditor status --check`, for probes and scripts: the star
// needs an operator. They sit beside the table of exitCodes (0, and 1, 2, 5
// when the status could not be read) and never collide with it. When more
// than one condition holds the code is the first in this order, the most
// urgent; each that holds is printed on stderr.
const (
	exitCheckHalted     = 10
	exitCheckNoLeader   = 11
	exitCheckPaused     = 12
	exitCheckQuarantine = 13
)

// statusCheckCodes is the one table of --check's codes: `auditor status -h`
// prints it and docs/operations.md's operator surface repeats it
// (TestStatusCheckCodesMatchTheDocsAndHelp).
var statusCheckCodes = []struct {
	code    int
	meaning string
}{
	{exitCheckHalted, "status --check: the star is halted (a broken invariant, a rewound metastore): no cycle runs until auditor resume"},
	{exitCheckNoLeader, "status --check: no live leader: no auditor holds the star's lease"},
	{exitCheckPaused, "status --check: the star is paused: the leader runs no cycle until auditor resume"},
	{exitCheckQuarantine, "status --check: more streams or slots quarantined than --max-quarantined (default 0: any); auditor release after the cause is fixed"},
}

// statusCheck judges a star's status for --check: the exit code, and one
// line for each condition that holds (none: exitOK).
func statusCheck(s daemon.Status, maxQuarantined int) (code int, why []string) {
	code = exitOK
	hold := func(c int, line string) {
		if code == exitOK {
			code = c
		}
		why = append(why, line)
	}
	if s.Halted {
		hold(exitCheckHalted, fmt.Sprintf("star %s is halted: %s", s.Star, s.HaltedReason))
	}
	if !s.Leader.Live {
		hold(exitCheckNoLeader, fmt.Sprintf("star %s has no live leader", s.Star))
	}
	if s.Paused {
		hold(exitCheckPaused, fmt.Sprintf("star %s is paused", s.Star))
	}
	if n := len(s.Quarantine); n > maxQuarantined {
		hold(exitCheckQuarantine, fmt.Sprintf("star %s has %d quarantined (more than --max-quarantined %d)", s.Star, n, maxQuarantined))
	}
	return code, why
}

// statusCheckHelp is what `auditor status -h` adds to its exit codes.
func statusCheckHelp() string {
	var b strings.Builder
	b.WriteString("exit codes of --check (0 when none holds; the first that holds, in this order):\n")
	for _, c := range statusCheckCodes {
		fmt.Fprintf(&b, "  %d  %s\n", c.code, c.meaning)
	}
	return b.String()
}
