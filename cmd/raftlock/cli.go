package main

import (
	"bytes"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
)

// releaseVersion is the version a release build stamps in with
// -ldflags "-X main.releaseVersion=v0.1.0" (make release); empty in other
// builds, which report the module version Go recorded.
var releaseVersion string

func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version")
	if err := parseNoArgs(fs, args, stderr); err != nil {
		return err
	}
	version, commit, modified := "(devel)", "unknown", ""
	goVersion := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goVersion = bi.GoVersion
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch {
			case s.Key == "vcs.revision":
				commit = s.Value
			case s.Key == "vcs.modified" && s.Value == "true":
				modified = " (modified)"
			}
		}
	}
	if releaseVersion != "" {
		version = releaseVersion
	}
	fmt.Fprintf(stdout, "raftlock %s\ncommit %s%s\n%s\n", version, commit, modified, goVersion)
	return nil
}

// completeCommand is the hidden command the completion scripts call with
// the words typed so far; it prints one candidate per line.
const completeCommand = "__complete"

// subcommands are the words that may follow command, for completion.
func subcommands(command string) []string {
	switch command {
	case "member":
		return []string{"list", "add", "promote", "remove"}
	case "leader":
		return []string{"transfer"}
	case "snapshot":
		return []string{"save", "restore"}
	case "certs":
		return []string{"init", "add-client", "add-member"}
	case "completion":
		return []string{"bash", "zsh"}
	}
	return nil
}

func complete(words []string, stdout io.Writer) {
	cur := ""
	if len(words) > 0 {
		cur, words = words[len(words)-1], words[:len(words)-1]
	}
	all := commands()
	if len(words) == 0 {
		for _, c := range all {
			if strings.HasPrefix(c.name, cur) {
				fmt.Fprintln(stdout, c.name)
			}
		}
		return
	}
	subs := subcommands(words[0])
	if !strings.HasPrefix(cur, "-") {
		if len(words) == 1 {
			for _, sub := range subs {
				if strings.HasPrefix(sub, cur) {
					fmt.Fprintln(stdout, sub)
				}
			}
		}
		return // other arguments: keys and files are the shell's own business
	}
	helpArgs := []string{"--help"}
	if len(words) > 1 && slices.Contains(subs, words[1]) {
		helpArgs = []string{words[1], "--help"}
	}
	for _, c := range all {
		if c.name != words[0] {
			continue
		}
		// A command's flags are whatever its --help lists.
		var help bytes.Buffer
		c.run(helpArgs, io.Discard, &help)
		for _, line := range strings.Split(help.String(), "\n") {
			f, ok := strings.CutPrefix(line, "  --")
			if !ok {
				continue
			}
			name, _, _ := strings.Cut(f, " ")
			if strings.HasPrefix("--"+name, cur) {
				fmt.Fprintln(stdout, "--"+name)
			}
		}
	}
}

const bashCompletion = `# bash completion for raftlock: source it, or put it in
# /etc/bash_completion.d/raftlock (raftlock completion bash > ...).
# It completes raftlock on PATH and the repository's bin/raftlock; the
# command as typed answers its own completions.
_raftlock() {
	local IFS=$'\n'
	COMPREPLY=($("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _raftlock raftlock bin/raftlock ./bin/raftlock
`

const zshCompletion = `#compdef raftlock
# zsh completion for raftlock: put it on your fpath as _raftlock
# (raftlock completion zsh > "${fpath[1]}/_raftlock").
_raftlock() {
	local -a candidates
	candidates=("${(@f)$(${words[1]} __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
	if (( ${#candidates} )) && [[ -n "${candidates[1]}" ]]; then
		compadd -- "${candidates[@]}"
	else
		_files
	fi
}
compdef _raftlock raftlock bin/raftlock ./bin/raftlock
`

func runCompletion(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("completion", "completion bash|zsh")
	pos, _, err := parse(fs, args, stderr)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want one shell: bash or zsh")
	}
	switch pos[0] {
	case "bash":
		io.WriteString(stdout, bashCompletion)
	case "zsh":
		io.WriteString(stdout, zshCompletion)
	default:
		return usageErr("no completion for %q: want bash or zsh", pos[0])
	}
	return nil
}
