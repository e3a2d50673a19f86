package main

import (
	"bytes"
	"errors"
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

// The README's table of serve's flags lists exactly what `serve --help`
// prints, in its order, with its defaults: the two cannot drift.
func TestREADMEFlagTable(t *testing.T) {
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
		readme = append(readme, helpFlag{name: m[1], def: strings.Trim(m[2], "`")})
	}
	help := parseHelp(t, newServeFlags().fs.FlagUsages())
	for i := 0; i < max(len(readme), len(help)); i++ {
		switch {
		case i >= len(readme):
			t.Errorf("README lacks --%s (default %s), row %d", help[i].name, help[i].def, i+1)
		case i >= len(help):
			t.Errorf("README lists --%s, which serve --help does not", readme[i].name)
		case readme[i].name != help[i].name || readme[i].def != help[i].def:
			t.Errorf("README row %d: --%s default %s; serve --help: --%s default %s", i+1, readme[i].name, readme[i].def, help[i].name, help[i].def)
		}
	}
}

// Every command's --help exits 0 and says, for every flag, what it does
// and its default: help prints non-zero defaults; a flag whose default is
// empty or 0 says what that means in its own words.
func TestEveryCommandExplainsItsFlags(t *testing.T) {
	explained := regexp.MustCompile(`\(default: |off when empty|\(0: |\(required`)
	for _, cmd := range [][]string{
		{"serve"}, {"import"}, {"backup"}, {"restore"}, {"apiservice"}, {"version"},
		{"history", "log"}, {"history", "get"}, {"history", "restore"}, {"history", "top"},
	} {
		name := strings.Join(cmd, " ")
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
