package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nova/auditor/migrations"
)

// Exit codes of `auditor migrate --status`, for deploy scripts and init
// containers: the database is not at this binary's version. They sit beside
// the table of exitCodes (0 when current, and 1, 2, 5 when the status could
// not be read) and never collide with it or with status --check's.
const (
	exitMigrateBehind = 20
	exitMigrateAhead  = 21
)

// migrateStatusCodes is the one table of --status's codes: `auditor
// migrate -h` prints it and docs/operations.md's operator surface repeats
// it (TestMigrateStatusCodesMatchTheDocsAndHelp).
var migrateStatusCodes = []struct {
	code    int
	meaning string
}{
	{exitMigrateBehind, "migrate --status: the database is behind this binary: migrations are pending (auditor migrate applies them)"},
	{exitMigrateAhead, "migrate --status: the database is ahead of this binary: a newer binary migrated it (run that release)"},
}

// migrateStatusHelp is what `auditor migrate -h` adds to its exit codes.
func migrateStatusHelp() string {
	var b strings.Builder
	b.WriteString("exit codes of --status (0 when the database is at this binary's version):\n")
	for _, c := range migrateStatusCodes {
		fmt.Fprintf(&b, "  %d  %s\n", c.code, c.meaning)
	}
	return b.String()
}

// writeMigrateStatus prints the database's version against the binary's,
// then every migration applied or pending, one a line, and returns
// --status's exit code.
func writeMigrateStatus(w io.Writer, s migrations.Status) int {
	code, state := exitOK, "current"
	switch {
	case s.Behind():
		code, state = exitMigrateBehind, fmt.Sprintf("behind, %d pending (auditor migrate applies them)", len(s.Pending))
	case s.Ahead():
		code, state = exitMigrateAhead, "ahead: a newer binary migrated it (run that release)"
	}
	fmt.Fprintf(w, "database schema version %d, this binary's %d: %s\n", s.Database, s.Binary, state)
	for _, a := range s.Applied {
		unknown := ""
		if a.Version > s.Binary {
			unknown = " (unknown to this binary)"
		}
		fmt.Fprintf(w, "applied  %04d %s  %s%s\n", a.Version, a.Name, a.AppliedAt.UTC().Format(time.RFC3339), unknown)
	}
	for _, m := range s.Pending {
		fmt.Fprintf(w, "pending  %04d %s\n", m.Version, m.Name)
	}
	return code
}

// writeMigrateDryRun prints what `auditor migrate` would apply; a database
// ahead of the binary is refused as migrate refuses it.
func writeMigrateDryRun(w io.Writer, s migrations.Status) error {
	if s.Ahead() {
		return fmt.Errorf("migrate --dry-run: %w: database at version %d, binary knows %d", migrations.ErrDatabaseNewer, s.Database, s.Binary)
	}
	if len(s.Pending) == 0 {
		fmt.Fprintf(w, "schema version %d: already current, nothing to apply\n", s.Database)
		return nil
	}
	fmt.Fprintf(w, "schema version %d: would apply %d migrations, up to %d (dry run: nothing applied)\n", s.Database, len(s.Pending), s.Binary)
	for _, m := range s.Pending {
		fmt.Fprintf(w, "would apply  %04d %s\n", m.Version, m.Name)
	}
	return nil
}
