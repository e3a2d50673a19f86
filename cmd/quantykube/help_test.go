package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

// helpFlag is one flag as --help prints it.
type helpFlag struct {
	name, typ, usage string
	// def is the value help prints after "(default ", unquoted; "-" when
	// it prints none (a zero value).
	def string
}

var (
	helpLine    = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(\[=true\|false\])?(?: (\S+))?\s+(.*)$`)
	helpDefault = regexp.MustCompile(` \(default (.+)\)$`)
)

// parseHelp reads the flag lines of pflag's FlagUsages.
func parseHelp(t *testing.T, usages string) []helpFlag {
	t.Helper()
	var flags []helpFlag
	for _, line := range strings.Split(strings.TrimRight(usages, "\n"), "\n") {
		m := helpLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("not a flag line: %q", line)
		}
		f := helpFlag{name: m[1], typ: m[3], usage: m[4], def: "-"}
		if m[2] != "" {
			f.typ = "bool"
		}
		if d := helpDefault.FindStringSubmatchIndex(f.usage); d != nil {
			f.def = f.usage[d[2]:d[3]]
			if s, err := strconv.Unquote(f.def); err == nil {
				f.def = s
			}
			f.usage = f.usage[:d[0]]
		}
		flags = append(flags, f)
	}
	return flags
}

var readmeRow = regexp.MustCompile("^\\| `--([a-z0-9-]+)` \\| (`[^`]*`|-) \\| (.+) \\|$")

// The README's table of serve's flags says what `serve --help` says: the
// same flags in the same order, the same defaults, and the same meaning
// word for word. Only the README's code spans differ: help cannot print
// backquotes (pflag takes a backquoted word in a usage as the value's
// name), so they are dropped before the two are compared.
func TestServeHelpIsREADMEFlagTable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Serving\n")
	if !ok {
		t.Fatal("README.md has no ## Serving section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var readme []helpFlag
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `--") {
			continue
		}
		m := readmeRow.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("README flag row not as | `--name` | `default` or - | meaning |: %q", line)
		}
		readme = append(readme, helpFlag{name: m[1], def: strings.Trim(m[2], "`"), usage: strings.ReplaceAll(m[3], "`", "")})
	}
	help := parseHelp(t, newServeFlags(io.Discard).fs.FlagUsages())
	if len(readme) == 0 || len(help) == 0 {
		t.Fatalf("README lists %d flags, serve --help %d", len(readme), len(help))
	}
	for i := 0; i < max(len(readme), len(help)); i++ {
		switch {
		case i >= len(readme):
			t.Errorf("README lacks --%s (default %s), row %d", help[i].name, help[i].def, i+1)
		case i >= len(help):
			t.Errorf("README lists --%s, which serve --help does not", readme[i].name)
		case readme[i].name != help[i].name || readme[i].def != help[i].def:
			t.Errorf("README row %d: --%s default %s; serve --help: --%s default %s", i+1, readme[i].name, readme[i].def, help[i].name, help[i].def)
		case readme[i].usage != help[i].usage:
			t.Errorf("README row %d, --%s, means\n\t%s\nserve --help says\n\t%s", i+1, readme[i].name, readme[i].usage, help[i].usage)
		}
	}
}

// Every command's --help exits 0 and says, for every flag, what it does
// and its default: help prints non-zero defaults; a flag whose default is
// empty or 0 says what that means in its own words.
func TestEveryCommandExplainsItsFlags(t *testing.T) {
	explained := regexp.MustCompile(`\(default: |off when empty|\(0: |\(required`)
	for _, c := range allCommands() {
		cmd := strings.Fields(c.name)
		name := c.name
		var out bytes.Buffer
		c := exec.Command(framework.Binary(t), append(cmd, "--help")...)
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			t.Errorf("quantykube %s --help: exit %d", name, ee.ExitCode())
		}
		text := out.String()
		if first, _, _ := strings.Cut(text, "\n"); !strings.Contains(first, "quantykube "+name) {
			t.Errorf("quantykube %s --help starts %q", name, first)
		}
		_, flags, ok := strings.Cut(text, "\nFlags:\n")
		if !ok {
			t.Errorf("quantykube %s --help lists no flags:\n%s", name, text)
			continue
		}
		if strings.TrimSpace(flags) == "" {
			continue
		}
		for _, f := range parseHelp(t, flags) {
			switch {
			case strings.TrimSpace(f.usage) == "":
				t.Errorf("quantykube %s --%s: no description", name, f.name)
			case f.def == "-" && f.typ != "bool" && !explained.MatchString(f.usage):
				t.Errorf("quantykube %s --%s: its default is empty or 0 and the help does not say what that means: %q", name, f.name, f.usage)
			}
		}
	}
}

// namedCommand is a command that takes flags, with its name after
// "quantykube ".
type namedCommand struct {
	name string
	cmd  Command
}

// allCommands are the commands and, in place of history, its subcommands.
func allCommands() []namedCommand {
	var all []namedCommand
	for _, c := range commands {
		if _, ok := c.cmd.(HistoryCommand); ok {
			for _, sub := range historyCommands {
				all = append(all, namedCommand{c.name + " " + sub.name, sub.cmd})
			}
			continue
		}
		if _, ok := c.cmd.(CheckCommand); ok {
			for _, sub := range checkCommands {
				all = append(all, namedCommand{c.name + " " + sub.name, sub.cmd})
			}
			continue
		}
		all = append(all, namedCommand{c.name, c.cmd})
	}
	return all
}

// Every command's usage starts with its synopsis, and its --help prints
// that usage and succeeds; the usages that list commands list them all.
func TestEveryCommandHasUsage(t *testing.T) {
	for _, c := range append(allCommands(), namedCommand{"history", HistoryCommand{}}, namedCommand{"check", CheckCommand{}}) {
		u := c.cmd.Usage()
		if !strings.HasPrefix(u, "quantykube "+c.name) {
			t.Errorf("quantykube %s: usage starts %q", c.name, strings.SplitN(u, "\n", 2)[0])
		}
		var out, errs bytes.Buffer
		if err := c.cmd.Run(t.Context(), []string{"--help"}, &out, &errs); err != nil {
			t.Errorf("quantykube %s --help: %v", c.name, err)
		}
		if !strings.Contains(out.String()+errs.String(), u) {
			t.Errorf("quantykube %s --help does not print its usage:\n%s%s", c.name, out.String(), errs.String())
		}
	}
	top := usage()
	for _, c := range commands {
		if !strings.Contains(top, "\n  quantykube "+c.name+" ") {
			t.Errorf("quantykube --help does not list %s:\n%s", c.name, top)
		}
	}
	for _, sub := range historyCommands {
		if !strings.Contains(HistoryCommand{}.Usage(), "\n  "+sub.cmd.Usage()+"\n") {
			t.Errorf("quantykube history --help does not list %q", sub.cmd.Usage())
		}
	}
	for _, sub := range checkCommands {
		synopsis, _, _ := strings.Cut(sub.cmd.Usage(), "\n")
		if !strings.Contains(CheckCommand{}.Usage(), "\n  "+synopsis+"\n") {
			t.Errorf("quantykube check --help does not list %q", synopsis)
		}
	}
}

// quantykube's own arguments: help succeeds, no command or an unknown one
// exits 2 with the usage, a failing command exits 1 with its error.
func TestRun(t *testing.T) {
	for _, c := range []struct {
		args      []string
		code      int
		out, errs string // in stdout and stderr
		whole     bool   // out is the whole of stdout
	}{
		{args: []string{"--help"}, out: usage(), whole: true},
		{args: []string{"-h"}, out: usage(), whole: true},
		{args: []string{"help"}, out: usage(), whole: true},
		{args: nil, code: 2, errs: usage()},
		{args: []string{"bogus"}, code: 2, errs: `quantykube: unknown command "bogus"`},
		{args: []string{"--version"}, out: "quantykube "},
		{args: []string{"version", "x"}, code: 1, errs: `quantykube: version takes no arguments, got ["x"]`},
		{args: []string{"history", "bogus"}, code: 1, errs: `quantykube: history: unknown command "bogus"`},
		{args: []string{"check", "bogus"}, code: 1, errs: `quantykube: check: unknown command "bogus" (want hash, perf)`},
		{args: []string{"check"}, code: 1, errs: `quantykube: check: missing command (hash, perf)`},
	} {
		var out, errs bytes.Buffer
		code := run(t.Context(), c.args, &out, &errs)
		if code != c.code {
			t.Errorf("quantykube %q: exit %d, want %d; stderr:\n%s", c.args, code, c.code, errs.String())
		}
		if !strings.Contains(out.String(), c.out) || c.whole && out.String() != c.out {
			t.Errorf("quantykube %q: stdout %q, want %q", c.args, out.String(), c.out)
		}
		if !strings.Contains(errs.String(), c.errs) {
			t.Errorf("quantykube %q: stderr %q, want %q in it", c.args, errs.String(), c.errs)
		}
	}
}
