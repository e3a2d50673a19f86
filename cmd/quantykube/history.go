package main

// `quantykube history`: a client of the quantykube.History service that a
// server runs on the same socket as its etcd API.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/quantyroot/quantykube/pkg/timearg"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// HistoryCommand is `quantykube history`: it runs one of
// historyCommands.
type HistoryCommand struct{}

// Usage is history's help, which lists its subcommands.
func (HistoryCommand) Usage() string {
	return `quantykube history: the retained history of keys (quantykube.History)

Usage:
  quantykube history log KEY [--prefix | --range-end E] [--rev N | --since TIME] [--limit N]
      every retained change to KEY (or to a prefix or range), oldest first
  quantykube history get KEY (--rev N | --at TIME)
      KEY as it was at revision N or at TIME
  quantykube history restore KEY (--rev N | --at TIME)
      write KEY back as it was: its old value (without a lease), or a
      delete if it did not exist then, as a new revision
  quantykube history top [--by bytes|revisions] [--limit N]
      what fills the retained history: the resource types, namespaces
      and keys holding the most of it, with their changes in the last hour

TIME is RFC 3339 (2024-05-01T12:00:00Z, 2024-05-01T14:00:00.250+02:00), a
local date-time (2024-05-01 14:00:00), "now", or relative to now: -15m,
-2h, -1h30m, -2d.

Output: -o table (default) or -o json: protojson of the response with the
spec's field names (for log, one LogResponse holding every entry read);
get also takes -o value (the raw value bytes).

Run 'quantykube history COMMAND --help' for the flags.
`
}

// historyCommands are history's subcommands, each a Command of its own.
var historyCommands = []struct {
	name string
	cmd  Command
}{
	{"log", HistoryLogCommand{}},
	{"get", HistoryGetCommand{}},
	{"restore", HistoryRestoreCommand{}},
	{"top", HistoryTopCommand{}},
}

// Run runs the subcommand args[0] names; help, -h and --help print the
// usage to stdout.
func (c HistoryCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, c.Usage())
		return errors.New("history: missing command (log, get, restore or top)")
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, c.Usage())
		return nil
	}
	for _, sub := range historyCommands {
		if sub.name == args[0] {
			return sub.cmd.Run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprint(stderr, c.Usage())
	return fmt.Errorf("history: unknown command %q", args[0])
}

// pointFlags are --rev and --at of get and restore.
type pointFlags struct {
	rev int64
	at  string
}

func (p *pointFlags) register(fs *pflag.FlagSet) {
	fs.Int64Var(&p.rev, "rev", 0, "the revision to read (default: none; give --rev or --at)")
	fs.StringVar(&p.at, "at", "", "the time to read: RFC 3339 or relative (-15m) (default: none; give --rev or --at)")
}

// apply sets the revision or time of req; exactly one is required unless
// optional.
func (p *pointFlags) apply(fs *pflag.FlagSet, req *historypb.Request, now time.Time, optional bool) error {
	revSet, atSet := fs.Changed("rev"), fs.Changed("at")
	switch {
	case revSet && atSet:
		return errors.New("--rev and --at exclude each other")
	case revSet:
		if p.rev <= 0 {
			return fmt.Errorf("--rev %d: want a revision > 0", p.rev)
		}
		req.Revision = p.rev
	case atSet:
		ms, err := timearg.ParseUnixMs(p.at, now)
		if err != nil {
			return fmt.Errorf("--at: %w", err)
		}
		req.UnixMs = ms
	case !optional:
		return errors.New("want --rev N or --at TIME")
	}
	return nil
}

// parseArgs parses a subcommand's flags and its single KEY argument. It
// returns done when --help was asked for.
func parseArgs(fs *pflag.FlagSet, args []string, conn *connFlags) (key []byte, done bool, err error) {
	if err := fs.Parse(args); err != nil {
		err = flagError(err)
		return nil, err == nil, err
	}
	if fs.NArg() != 1 {
		return nil, false, fmt.Errorf("want exactly one KEY, got %d arguments\n\nUsage: %s", fs.NArg(), fs.Name())
	}
	if err := conn.check(); err != nil {
		return nil, false, err
	}
	return []byte(fs.Arg(0)), false, nil
}

// prefixEnd is the range end of every key that starts with prefix, as
// etcd computes it; "\x00" (every key) when no such end exists.
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// maxPage is the largest page the server gives.
const maxPage = 10000

// HistoryLogCommand is `quantykube history log`.
type HistoryLogCommand struct{}

// Usage is history log's help.
func (HistoryLogCommand) Usage() string {
	return "quantykube history log KEY [--prefix | --range-end E] [--rev N | --since TIME] [--limit N]"
}

// Run prints the retained changes to a key, a prefix or a range.
func (c HistoryLogCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var conn connFlags
	var prefix bool
	var rangeEnd, since, cont string
	var rev, limit int64
	fs.BoolVar(&prefix, "prefix", false, "every key that starts with KEY")
	fs.StringVar(&rangeEnd, "range-end", "", "every key in [KEY, E); \"\\x00\" as E: every key >= KEY (default: none, KEY alone)")
	fs.Int64Var(&rev, "rev", 0, "list changes from this revision on (default: none, from the oldest retained)")
	fs.StringVar(&since, "since", "", "list changes from this time on: RFC 3339 or relative (-15m) (default: none, from the oldest retained)")
	fs.Int64Var(&limit, "limit", 0, "list at most N changes (default: all, read in pages)")
	fs.StringVar(&cont, "continue", "", "resume a listing cut by --limit: the token it printed (default: none, from the start)")
	conn.register(fs)
	key, done, err := parseArgs(fs, args, &conn)
	if done || err != nil {
		return err
	}
	req := &historypb.Request{Key: key, Continue: cont}
	switch {
	case prefix && fs.Changed("range-end"):
		return errors.New("--prefix and --range-end exclude each other")
	case prefix:
		if len(key) == 0 {
			req.Key = []byte{0}
		}
		req.RangeEnd = prefixEnd(key)
	case fs.Changed("range-end"):
		if rangeEnd == "" {
			return errors.New("--range-end: empty")
		}
		req.RangeEnd = []byte(rangeEnd)
		if rangeEnd == `\x00` {
			req.RangeEnd = []byte{0}
		}
	}
	switch {
	case fs.Changed("rev") && fs.Changed("since"):
		return errors.New("--rev and --since exclude each other")
	case fs.Changed("rev"):
		if rev <= 0 {
			return fmt.Errorf("--rev %d: want a revision > 0", rev)
		}
		req.Revision = rev
	case fs.Changed("since"):
		ms, err := timearg.ParseUnixMs(since, time.Now())
		if err != nil {
			return fmt.Errorf("--since: %w", err)
		}
		req.UnixMs = ms
	}
	if fs.Changed("limit") && limit <= 0 {
		return fmt.Errorf("--limit %d: want a count > 0", limit)
	}

	hc, err := conn.connect(ctx)
	if err != nil {
		return err
	}
	defer hc.Close()
	all, err := readLog(ctx, hc, req, limit)
	if err != nil {
		return err
	}
	if conn.output == "json" {
		return writeJSON(stdout, all)
	}
	if err := writeLogTable(stdout, all.GetEntries(), time.Local); err != nil {
		return err
	}
	if all.GetContinue() != "" {
		// The token is bound to the request: a relative --since given
		// again would name another time, so the hint names the one used.
		again := ""
		if req.UnixMs != 0 && since != timearg.Format(req.UnixMs, time.UTC) {
			again = " --since " + timearg.Format(req.UnixMs, time.UTC)
		}
		fmt.Fprintf(stderr, "more changes follow: run it again with the same arguments and%s --continue %s\n", again, all.GetContinue())
	}
	return nil
}

// maxPages bounds the pages one listing reads: at the server's page size
// of 1000 that is 10 million changes.
const maxPages = 10000

// readLog reads pages until the log ends or limit (if > 0) entries are
// read, and returns them as one LogResponse; its continue token is set
// when the listing stopped at the limit, its header revision is that of
// the first page.
func readLog(ctx context.Context, hc *historyConn, req *historypb.Request, limit int64) (*historypb.LogResponse, error) {
	all := &historypb.LogResponse{}
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("log: more than %d pages; narrow it with --rev, --since or --limit", maxPages)
		}
		if limit > 0 {
			req.Limit = min(limit-int64(len(all.Entries)), maxPage)
		}
		resp, err := call(ctx, hc, hc.client.Log, req)
		if err != nil {
			return nil, err
		}
		if page == 0 {
			all.HeaderRevision = resp.GetHeaderRevision()
		}
		all.Entries = append(all.Entries, resp.GetEntries()...)
		all.Continue = resp.GetContinue()
		if all.Continue == "" || (limit > 0 && int64(len(all.Entries)) >= limit) {
			return all, nil
		}
		if len(resp.GetEntries()) == 0 && all.Continue == req.Continue {
			return nil, errors.New("log: the server returned an empty page with the same continue token")
		}
		req.Continue = all.Continue
	}
}

// pointSetup parses the flags of a subcommand that reads one key at one
// revision or time (get, restore) and connects, so that both take the same
// flags and fail the same way. A nil connection with a nil error means
// --help was shown.
func pointSetup(ctx context.Context, c Command, args []string, stderr io.Writer, optional bool, outputs ...string) (*historypb.Request, string, *historyConn, error) {
	fs := newFlagSet(c, stderr)
	var conn connFlags
	var point pointFlags
	point.register(fs)
	conn.register(fs, outputs...)
	key, done, err := parseArgs(fs, args, &conn)
	if done || err != nil {
		return nil, "", nil, err
	}
	req := &historypb.Request{Key: key}
	if err := point.apply(fs, req, time.Now(), optional); err != nil {
		return nil, "", nil, err
	}
	hc, err := conn.connect(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	return req, conn.output, hc, nil
}

// HistoryGetCommand is `quantykube history get`.
type HistoryGetCommand struct{}

// Usage is history get's help.
func (HistoryGetCommand) Usage() string {
	return "quantykube history get KEY (--rev N | --at TIME)"
}

// Run prints a key as it was at a revision or a time.
func (c HistoryGetCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	req, output, hc, err := pointSetup(ctx, c, args, stderr, true, "value")
	if err != nil || hc == nil {
		return err
	}
	defer hc.Close()
	resp, err := call(ctx, hc, hc.client.Get, req)
	if err != nil {
		return err
	}
	switch output {
	case "json":
		return writeJSON(stdout, resp)
	case "value":
		if resp.GetKv() == nil {
			return fmt.Errorf("%s did not exist at revision %d", displayKey(req.Key), resp.GetRevision())
		}
		_, err := stdout.Write(resp.GetKv().GetValue())
		return err
	}
	return writeGetTable(stdout, req.Key, resp)
}

// HistoryRestoreCommand is `quantykube history restore`.
type HistoryRestoreCommand struct{}

// Usage is history restore's help.
func (HistoryRestoreCommand) Usage() string {
	return "quantykube history restore KEY (--rev N | --at TIME)"
}

// Run writes a key back as it was at a revision or a time.
func (c HistoryRestoreCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	req, output, hc, err := pointSetup(ctx, c, args, stderr, false)
	if err != nil || hc == nil {
		return err
	}
	defer hc.Close()
	resp, err := call(ctx, hc, hc.client.Restore, req)
	if err != nil {
		return err
	}
	if output == "json" {
		return writeJSON(stdout, resp)
	}
	return writeRestoreTable(stdout, req.Key, resp)
}
