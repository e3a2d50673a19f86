package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// MigrateCommand is `quantykube migrate`.
type MigrateCommand struct{}

// Usage is migrate's help.
func (MigrateCommand) Usage() string {
	return `quantykube migrate --from ENDPOINT --to ENDPOINT

Copies a QuantyKube store to an empty one, between SQLite, PostgreSQL and
MySQL in either direction, with all of its retained history: every log
row at its revision, the live keys, the leases, the compaction and
retention floors and retention's rules. The target answers reads,
watches and History at the same revisions as the source, so
kube-apiserver's resourceVersions carry on.

The source is read in one read transaction, a consistent snapshot at one
revision; a server may still run on it, but what it writes after the
snapshot is not copied: stop it first to move a store (docs/OPERATIONS.md).
The target must be empty; it is written in batches, and until the last
one commits it refuses to be served. A migrate interrupted midway is
completed by running it again: it starts over on the half-written target.
Progress goes to stderr. The replication lineage is not copied: the
target replicates to a bucket of its own (docs/adr/050-migrate.md).`
}

// migrateStopEnv, when set to N, stops migrate after its Nth committed
// batch, until killed: the interruption tests kill it there, at a point
// they know, rather than racing the copy.
const migrateStopEnv = "QUANTYKUBE_TEST_MIGRATE_STOP_AFTER_BATCHES"

// Run migrates the store.
func (c MigrateCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var from, to endpoint.Config
	fs.StringVar(&from.Endpoint, "from", "", "the store to copy (required): sqlite://path (or a bare path), postgres://… or mysql://…, as serve's --endpoint")
	fs.StringVar(&to.Endpoint, "to", "", "the empty store to fill (required), in the same forms")
	batch := fs.Int("batch-rows", 1000, "rows written to the target per transaction")
	var lf logFlags
	lf.register(fs)
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("migrate takes no arguments, got %q", fs.Args())
	case from.Endpoint == "":
		return errors.New("--from is required: the store to copy")
	case to.Endpoint == "":
		return errors.New("--to is required: the empty store to fill")
	case *batch < 1:
		return fmt.Errorf("--batch-rows %d: want at least 1", *batch)
	}
	log, err := lf.logger(stderr)
	if err != nil {
		return err
	}
	src, err := endpoint.NewDialect(from)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	dst, err := endpoint.NewDialect(to)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	opts := mvcc.MigrateOptions{Progress: stderr, BatchRows: *batch, Logger: log}
	if v := os.Getenv(migrateStopEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%s=%q: want a number of batches", migrateStopEnv, v)
		}
		opts.AfterBatch = func(done int) {
			if done == n {
				fmt.Fprintf(stderr, "migrate: stopped after %d batches (%s)\n", done, migrateStopEnv)
				<-ctx.Done()
			}
		}
	}
	st, err := mvcc.Migrate(ctx, src, dst, opts)
	if err != nil {
		return fmt.Errorf("%s to %s: %w", endpoint.RedactEndpoint(from.Endpoint), endpoint.RedactEndpoint(to.Endpoint), err)
	}
	fmt.Fprintf(stdout, "migrated revision %d: %d log rows, %d live keys, %d leases, %d retention rules\n", st.Rev, st.LogRows, st.Keys, st.Leases, st.Rules)
	return nil
}
