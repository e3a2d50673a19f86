package main

// `quantykube import`: fill an empty store from kine or etcd, keeping
// every key's revisions and the store's revision (pkg/importer reads the
// source, mvcc.Import writes the target).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/importer"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// ImportCommand is `quantykube import`.
type ImportCommand struct{}

// Usage is import's help.
func (ImportCommand) Usage() string {
	return `quantykube import --from SOURCE [--endpoint TARGET] [flags]

Fills an empty QuantyKube store with the live keys of a kine database or a
running etcd, read at one revision: every key keeps its value, lease, create
and mod revision, and the store's revision becomes the source's, so that
kube-apiserver's resourceVersions carry on. History before that revision is
not imported. kine's own keys (its compaction marker, its health key) are
left out. The source is only read; stop kube-apiserver (k3s) first so
that nothing is written after the revision read. The target must be an empty
store or database, served by no QuantyKube server, and not the source; it is
written in one transaction: a failed import leaves it empty, and can be run
again.

SOURCE is sqlite://PATH or a path (kine's SQLite file, as k3s keeps it in
/var/lib/rancher/k3s/server/db/state.db), postgres://... or mysql://...
(kine's database, mysql:// in either of kine's forms), or etcd://HOST:PORT, http://HOST:PORT, https://HOST:PORT (a running etcd;
several endpoints separated by commas).`
}

type importFlags struct {
	fs     *pflag.FlagSet
	from   string
	cfg    endpoint.Config
	src    importer.Options
	dryRun bool
	log    logFlags
}

func newImportFlags(stderr io.Writer) *importFlags {
	f := &importFlags{fs: newFlagSet(ImportCommand{}, stderr)}
	fs := f.fs
	fs.StringVar(&f.from, "from", "", "the store to read (required): sqlite://PATH, postgres://..., mysql://..., etcd://HOST:PORT, http://HOST:PORT or https://HOST:PORT")
	registerDatastoreFlags(fs, &f.cfg, "the empty QuantyKube database to fill, as serve takes it")
	fs.StringVar(&f.src.TLS.CAFile, "cacert", "", "etcd or mysql source: CA that verifies the server's certificate, as etcdctl's --cacert (default: none, the system's CAs for https://)")
	fs.StringVar(&f.src.TLS.CertFile, "cert", "", "etcd or mysql source: client certificate, as etcdctl's --cert (default: none)")
	fs.StringVar(&f.src.TLS.KeyFile, "key", "", "etcd or mysql source: client key, as etcdctl's --key (default: none)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "read and check the source and report what would be imported; the target is not opened and nothing is written")
	f.log.register(fs)
	return f
}

func (f *importFlags) parse(args []string) error {
	if err := f.fs.Parse(args); err != nil {
		return err
	}
	switch {
	case f.fs.NArg() > 0:
		return fmt.Errorf("import takes no arguments, got %q", f.fs.Args())
	case f.from == "":
		return errors.New("--from is required: the kine database or etcd to import from")
	case (f.src.TLS.CertFile == "") != (f.src.TLS.KeyFile == ""):
		return errors.New("--cert and --key go together")
	}
	return nil
}

// Run imports: the report goes to stdout, progress (on a terminal) and
// logs to stderr.
func (ImportCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newImportFlags(stderr)
	if err := f.parse(args); err != nil {
		return flagError(err)
	}
	log, err := f.log.logger(stderr)
	if err != nil {
		return err
	}
	f.cfg.Logger = log
	if !f.dryRun && importer.SameDatabase(f.from, f.cfg.Endpoint) {
		return errors.New("import: --endpoint names the database --from reads: the target must be another, empty database")
	}
	var d mvcc.Dialect
	if !f.dryRun {
		if d, err = endpoint.NewDialect(f.cfg); err != nil {
			return fmt.Errorf("import: target: %w", err)
		}
	}
	src, err := importer.Open(ctx, f.from, f.src)
	if err != nil {
		return err
	}
	defer src.Close()
	im, err := mvcc.BeginImport(ctx, d, mvcc.ImportOptions{DryRun: f.dryRun, Logger: log})
	if err != nil {
		return err
	}
	defer im.Close()
	p := newProgress(stderr, "importing")
	sum, err := src.Read(ctx, &progressSink{im: im, p: p})
	p.done()
	if err != nil {
		return err
	}
	stats, err := im.Commit(sum.Rev)
	if err != nil {
		return err
	}
	writeImportReport(stdout, src.String(), f.cfg.Endpoint, f.dryRun, stats, sum)
	return nil
}

// progressSink counts what goes through it to mvcc.Import.
type progressSink struct {
	im *mvcc.Import
	p  *progress
}

func (s *progressSink) Put(kv *mvccpb.KeyValue) error {
	if err := s.im.Put(kv); err != nil {
		return err
	}
	st := s.im.Stats()
	s.p.update(func() string {
		return fmt.Sprintf("%d keys, %s", st.Keys, formatBytes(st.KeyBytes+st.ValueBytes))
	})
	return nil
}

func (s *progressSink) Lease(id, ttl int64) error { return s.im.Lease(id, ttl) }

func writeImportReport(w io.Writer, from, to string, dryRun bool, st mvcc.ImportStats, sum importer.Summary) {
	if dryRun {
		fmt.Fprintf(w, "dry run: nothing was written. %s would import:\n", from)
	} else {
		fmt.Fprintf(w, "imported %s into %s:\n", from, endpoint.RedactEndpoint(to))
	}
	fmt.Fprintf(w, "  revision  %d\n", st.Rev)
	fmt.Fprintf(w, "  keys      %d (%s: keys %s, values %s)\n", st.Keys, formatBytes(st.KeyBytes+st.ValueBytes), formatBytes(st.KeyBytes), formatBytes(st.ValueBytes))
	fmt.Fprintf(w, "  leases    %d", st.Leases)
	if sum.EndedLeases > 0 {
		fmt.Fprintf(w, " (%d had ended since: their keys go as soon as the server starts)", sum.EndedLeases)
	}
	fmt.Fprintln(w)
	reasons := make([]string, 0, len(sum.Skipped))
	for r := range sum.Skipped {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "  skipped   %d: %s\n", sum.Skipped[r], r)
	}
}

// formatBytes is n in B, KiB, MiB or GiB, for people.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 2 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMG"[i])
}

// progress shows a long operation's progress on one terminal line, at most
// a few times a second; it shows nothing when w is not a terminal.
type progress struct {
	w     io.Writer
	what  string
	on    bool
	now   func() time.Time
	last  time.Time
	shown bool
}

func newProgress(w io.Writer, what string) *progress {
	return &progress{w: w, what: what, on: isTerminal(w), now: time.Now}
}

func (p *progress) update(line func() string) {
	if !p.on || p.now().Sub(p.last) < 200*time.Millisecond {
		return
	}
	p.last = p.now()
	p.shown = true
	// \r and "erase to the end of the line": the line is rewritten in place.
	fmt.Fprintf(p.w, "\r\x1b[K%s: %s", p.what, line())
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
