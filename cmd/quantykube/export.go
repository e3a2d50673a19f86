package main

// `quantykube export --etcd-snapshot`: the way out to etcd, a snapshot
// of the live state that etcdutl snapshot restore accepts (ADR-051).

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/etcdsnap"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// ExportCommand is `quantykube export`.
type ExportCommand struct{}

// Usage is export's help.
func (ExportCommand) Usage() string {
	return `quantykube export --endpoint DSN --etcd-snapshot FILE

Writes the store's live state at its latest revision as an etcd v3.6
snapshot, FILE (which must not exist): the bbolt file 'etcdctl snapshot
save' writes, with the SHA-256 'etcdutl snapshot restore' verifies. Each
live key keeps its value (as stored: kube-apiserver's protobuf), create
and mod revision, version and lease; the leases keep their TTL; etcd
starts at the store's revision, so kube-apiserver's resourceVersions
stay as they were. The snapshot holds no history: in etcd, the revisions
below the store's are compacted (docs/OPERATIONS.md, "Leaving for etcd").
The store is read in one read transaction, as a reader beside a server
that may run on it: nothing is locked or written; stop the server (or
kube-apiserver) first to export its last state.`
}

// Run writes the snapshot and prints what it holds.
func (c ExportCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var cfg endpoint.Config
	registerDatastoreFlags(fs, &cfg, "the store to export (required)")
	fs.Lookup("endpoint").DefValue, cfg.Endpoint = "", ""
	file := fs.String("etcd-snapshot", "", "the etcd v3.6 snapshot to write (required; must not exist)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("export takes no arguments, got %q", fs.Args())
	case !fs.Changed("endpoint"):
		return errors.New("--endpoint is required: the database of the store to export")
	case *file == "":
		return errors.New("--etcd-snapshot FILE is required: the snapshot to write")
	}
	r, where, err := openReader(ctx, "export", cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := etcdsnap.Create(*file)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	v := &snapshotVisitor{w: w}
	if err := r.ReadLive(ctx, v); err != nil {
		w.Abort()
		return fmt.Errorf("export: %s: %w", where, err)
	}
	if err := w.Finish(v.rev); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s: revision %d (compacted at %d), %d keys (%d bytes), %d leases, %d bytes\n",
		*file, v.rev, v.rev, w.Keys, w.KeyBytes, w.Leases, w.Size)
	return nil
}

// snapshotVisitor writes the live state ReadLive reads into a snapshot.
type snapshotVisitor struct {
	w   *etcdsnap.Writer
	rev int64
}

func (v *snapshotVisitor) Revision(rev, _ int64) error {
	v.rev = rev
	return nil
}

func (v *snapshotVisitor) Key(kv mvcc.LiveKey) error {
	// Put marshals the key and value into a record of its own: the
	// reader's slices are not kept.
	return v.w.Put(etcdsnap.KeyValue{Key: kv.Key, Value: kv.Value, CreateRevision: kv.CreateRev,
		ModRevision: kv.ModRev, Version: kv.Version, Lease: kv.Lease})
}

func (v *snapshotVisitor) Lease(id, ttl int64) error { return v.w.Lease(id, ttl) }
