package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/nova/auditor/internal/config"
)

// bashCompletion completes the subcommands, then each subcommand's flags,
// which it reads from `auditor CMD --help` (printed to stdout), so the
// script never goes stale as flags are added.
const bashCompletion = `# bash completion for auditor: source <(auditor completion bash)
_auditor() {
    local cur cmd
    cur="${COMP_WORDS[COMP_CWORD]}"
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "%s --help --version" -- "$cur"))
        return
    fi
    cmd="${COMP_WORDS[1]}"
    case "$cur" in
    -*)
        local flags
        flags=$("${COMP_WORDS[0]}" "$cmd" --help 2>/dev/null | sed -n 's/^  -\([a-z0-9-]*\).*/--\1/p')
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        ;;
    *)
        COMPREPLY=($(compgen -f -- "$cur"))
        ;;
    esac
}
complete -F _auditor auditor
`

// cmdCompletion is `auditor completion bash`.
func cmdCompletion(_ context.Context, e env, args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(e.stdout, "usage: auditor completion bash   (source <(auditor completion bash))")
		fmt.Fprint(e.stdout, commandExitsHelp("completion"))
		return exitOK
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			return exitCode(e, config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("auditor completion takes no flag: %s", a)})
		}
	}
	if len(args) != 1 || args[0] != "bash" {
		return exitCode(e, config.Config{}, &config.Error{Field: "completion", Msg: "want one shell: bash"})
	}
	names := make([]string, 0, len(commands()))
	for n := range commands() {
		if !testingCommands[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Fprintf(e.stdout, bashCompletion, strings.Join(names, " "))
	return exitOK
}
