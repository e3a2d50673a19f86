package util

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// Point is --rev or --at, or neither: now.
type Point struct {
	Rev int64
	At  string
}

// AddFlags registers --rev and --at, for the point what ("to show").
func (p *Point) AddFlags(fs *pflag.FlagSet, what string) {
	fs.Int64Var(&p.Rev, "rev", 0, "the revision "+what)
	fs.StringVar(&p.At, "at", "", "the time "+what+": RFC 3339, a local date-time or relative (-15m)")
}

// Validate checks that --rev and --at are not both given and --rev is a
// revision; required says one of them must be.
func (p *Point) Validate(required bool) error {
	switch {
	case p.Rev != 0 && p.At != "":
		return errors.New("--rev and --at exclude each other")
	case p.Rev < 0:
		return fmt.Errorf("--rev %d: want a revision > 0", p.Rev)
	case required && p.Rev == 0 && p.At == "":
		return errors.New("want --rev N or --at TIME")
	}
	return nil
}

// Request is the history request for key at the point.
func (p *Point) Request(key string, clock Clock) (*historypb.Request, error) {
	req := &historypb.Request{Key: []byte(key)}
	switch {
	case p.Rev > 0:
		req.Revision = p.Rev
	case p.At != "":
		ms, err := clock.ParseAt(p.At)
		if err != nil {
			return nil, err
		}
		req.UnixMs = ms
	}
	return req, nil
}

// Flag names the flag that gave the point.
func (p *Point) Flag() string {
	if p.At != "" {
		return "--at " + p.At
	}
	return fmt.Sprintf("--rev %d", p.Rev)
}

// Output is -o: the formats a command prints, the first its default.
type Output struct {
	Format  string
	Formats []string
}

// AddOutputFlag registers -o with formats, the first the default; the
// shell completes them.
func AddOutputFlag(cmd *cobra.Command, formats ...string) *Output {
	o := &Output{Formats: formats}
	cmd.Flags().StringVarP(&o.Format, "output", "o", formats[0], "output format: "+strings.Join(formats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
	return o
}

// Validate checks -o.
func (o *Output) Validate() error {
	if !slices.Contains(o.Formats, o.Format) {
		return fmt.Errorf("--output %q: want one of %s", o.Format, strings.Join(o.Formats, ", "))
	}
	return nil
}

// AddKeyFlag registers --key, for every command that names one object.
func AddKeyFlag(cmd *cobra.Command, key *string) {
	cmd.Flags().StringVar(key, "key", "", "a raw storage key (such as /registry/configmaps/default/web) instead of TYPE/NAME")
}

// AddShowSecretsFlag registers --show-secrets, for the commands that
// print values.
func AddShowSecretsFlag(cmd *cobra.Command, show *bool, where string) {
	cmd.Flags().BoolVar(show, "show-secrets", false, "print a Secret's values "+where+" (by default masked, as kubectl diff masks them)")
}
