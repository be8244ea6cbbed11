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
        flags=$("${COMP_WORDS[0]}" "$cmd" --help 2>/dev/null | sed -n 's/^  --\([a-z0-9-]*\).*/--\1/p')
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        ;;
    *)
        COMPREPLY=($(compgen -f -- "$cur"))
        ;;
    esac
}
complete -F _auditor auditor
`

// zshCompletion is the same for zsh: the subcommands, then each one's
// flags read from its --help.
const zshCompletion = `#compdef auditor
# zsh completion for auditor: source <(auditor completion zsh), after compinit
_auditor() {
    if (( CURRENT == 2 )); then
        compadd -- %s --help --version
        return
    fi
    local -a flags
    flags=(${(f)"$(${words[1]} ${words[2]} --help 2>/dev/null | sed -n 's/^  --\([a-z0-9-]*\).*/--\1/p')"})
    if [[ $PREFIX == -* ]]; then
        compadd -- $flags
    else
        _files
    fi
}
compdef _auditor auditor
`

// fishCompletion is the same for fish.
const fishCompletion = `# fish completion for auditor: auditor completion fish | source
function __auditor_flags
    set -l words (commandline -opc)
    $words[1] $words[2] --help 2>/dev/null | string replace -rf '^  --([a-z0-9-]+).*' -- '--$1'
end
complete -c auditor -f
complete -c auditor -n __fish_use_subcommand -a '%s'
complete -c auditor -n 'not __fish_use_subcommand' -a '(__auditor_flags)'
`

// cmdCompletion is `auditor completion bash|zsh|fish`.
func cmdCompletion(_ context.Context, e env, args []string) int {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintln(e.stdout, "usage: auditor completion bash|zsh|fish   (bash: source <(auditor completion bash); zsh: the same after compinit; fish: auditor completion fish | source)")
		fmt.Fprint(e.stdout, commandExitsHelp("completion"))
		return exitOK
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			return exitCode(e, config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("auditor completion takes no flag: %s", a)})
		}
	}
	scripts := map[string]string{"bash": bashCompletion, "zsh": zshCompletion, "fish": fishCompletion}
	var script string
	if len(args) == 1 {
		script = scripts[args[0]]
	}
	if script == "" {
		return exitCode(e, config.Config{}, &config.Error{Field: "completion", Msg: "want one shell: bash, zsh or fish"})
	}
	names := make([]string, 0, len(commands()))
	for n := range commands() {
		if !testingCommands[n] {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	fmt.Fprintf(e.stdout, script, strings.Join(names, " "))
	return exitOK
}
