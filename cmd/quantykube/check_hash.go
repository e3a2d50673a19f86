package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// CheckHashCommand is `quantykube check hash`.
type CheckHashCommand struct{}

// Usage is check hash's help.
func (CheckHashCommand) Usage() string {
	return `quantykube check hash --endpoint DSN [--revision N] [--history-from F] [-o text|json|hex]

Prints a hash of the store's state at a revision: SHA-256 over every key
live at it, in byte order, with its value, create and mod revision, version
and lease (docs/adr/046 gives the exact bytes). It is the same on SQLite,
PostgreSQL and MySQL: two stores that hold the same keys at the same
revisions hash alike, whatever database holds them, so replicas' database,
a backup, an import and a migrated store can be compared. With
--history-from F it also covers every change the log holds with
F < revision <= N. The store is only read, as a reader beside a server
that may run on it: nothing is locked or written. A revision below the
floor (compacted, or pruned by retention) or above the store's is refused.`
}

// Run hashes the store and prints the hash.
func (c CheckHashCommand) Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c, stderr)
	var cfg endpoint.Config
	registerDatastoreFlags(fs, &cfg, "the store to hash (required)")
	// No default: a check of ./db/state.db by mistake would say nothing.
	fs.Lookup("endpoint").DefValue, cfg.Endpoint = "", ""
	rev := fs.Int64("revision", 0, "the revision to hash (0: the store's latest)")
	from := fs.Int64("history-from", -1, "also hash the log's changes above this revision, up to --revision (-1: none, the live state alone)")
	output := fs.StringP("output", "o", "text", "text, json (every figure) or hex (the hash alone)")
	if err := fs.Parse(args); err != nil {
		return flagError(err)
	}
	switch {
	case fs.NArg() != 0:
		return fmt.Errorf("check hash takes no arguments, got %q", fs.Args())
	case !fs.Changed("endpoint"):
		return errNoEndpoint
	case *rev < 0:
		return fmt.Errorf("--revision %d: want a revision, or 0 for the latest", *rev)
	case *from < -1:
		return fmt.Errorf("--history-from %d: want a revision, or -1 for none", *from)
	case *output != "text" && *output != "json" && *output != "hex":
		return fmt.Errorf("-o %q: want text, json or hex", *output)
	}
	r, where, err := openReader(ctx, "check hash", cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	res, err := r.Hash(ctx, mvcc.HashQuery{Rev: *rev, History: *from >= 0, HistoryFrom: *from})
	if err != nil {
		return fmt.Errorf("check hash: %s: %w", where, err)
	}
	return writeHash(stdout, *output, res)
}

// hashReport is check hash's -o json.
type hashReport struct {
	Hash        string `json:"hash"`
	Revision    int64  `json:"revision"`
	Keys        int64  `json:"keys"`
	Floor       int64  `json:"floor"`
	HistoryFrom *int64 `json:"historyFrom,omitempty"`
	Revisions   int64  `json:"historyRevisions,omitempty"`
	Changes     int64  `json:"historyChanges,omitempty"`
	// HashKV is what the etcd API's HashKV answers at the revision: the
	// hash's first four bytes, when it covers no history.
	HashKV *uint32 `json:"hashKV,omitempty"`
}

func writeHash(w io.Writer, output string, res *mvcc.HashResult) error {
	switch output {
	case "hex":
		_, err := fmt.Fprintln(w, res.Hex())
		return err
	case "json":
		rep := hashReport{Hash: res.Hex(), Revision: res.Rev, Keys: res.Keys, Floor: res.Floor}
		if res.History {
			rep.HistoryFrom, rep.Revisions, rep.Changes = &res.HistoryFrom, res.Revisions, res.Changes
		} else {
			kv := res.Uint32()
			rep.HashKV = &kv
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	fmt.Fprintf(w, "hash      %s\n", res.Hex())
	fmt.Fprintf(w, "revision  %d (floor %d)\n", res.Rev, res.Floor)
	fmt.Fprintf(w, "keys      %d\n", res.Keys)
	if res.History {
		_, err := fmt.Fprintf(w, "history   %d revisions, %d changes above revision %d\n", res.Revisions, res.Changes, res.HistoryFrom)
		return err
	}
	_, err := fmt.Fprintf(w, "hashkv    %d (what etcd's HashKV answers at this revision)\n", res.Uint32())
	return err
}
