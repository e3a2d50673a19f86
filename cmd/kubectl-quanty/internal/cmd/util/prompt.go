package util

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Prompter asks questions on standard error and reads the answers from
// standard input, one line an answer.
type Prompter struct {
	out     io.Writer
	in      io.Reader
	answers *bufio.Reader
}

// NewPrompter asks on out and reads from in.
func NewPrompter(in io.Reader, out io.Writer) *Prompter { return &Prompter{in: in, out: out} }

// Confirm asks question; yes answers for scripts. An empty answer is def.
func (p *Prompter) Confirm(question string, def, yes bool) (bool, error) {
	if yes {
		return true, nil
	}
	hint := "[y/N]"
	if def {
		hint = "[Y/n]"
	}
	fmt.Fprintf(p.out, "%s %s ", question, hint)
	if p.answers == nil {
		p.answers = bufio.NewReader(p.in)
	}
	line, err := p.answers.ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(p.out)
		return false, errors.New("no answer on standard input: pass --yes to go ahead without asking")
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "":
		return def, nil
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
