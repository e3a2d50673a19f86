package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// storeStatus is `quantykube status --endpoint`: what the store's
// database holds, read without a server.
func storeStatus(ctx context.Context, cfg endpoint.Config, output string, w io.Writer) error {
	if output != "text" && output != "json" {
		return fmt.Errorf("-o %q: want text or json", output)
	}
	r, where, err := openReader(ctx, "status", cfg)
	if err != nil {
		return err
	}
	defer r.Close()
	st, err := r.Status(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if output == "json" {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	}
	return printStoreStatus(w, where, st, time.Now())
}

func printStoreStatus(w io.Writer, where string, st *mvcc.StoreStatus, now time.Time) error {
	tw := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-16s "+format+"\n", append([]any{name}, args...)...)
	}
	tw("store", "%s (%s, schema %d)", where, st.Dialect, st.Schema)
	last := "none yet"
	if !st.LastCommit.IsZero() {
		last = st.LastCommit.Format(time.RFC3339Nano)
	}
	tw("revision", "%d (last commit %s)", st.Rev, last)
	tw("floor", "%d (compact %d, retention %d)", st.Floor, st.Compact, st.RetainFloor)
	if st.Reset > 0 {
		tw("reset", "%d: the revision was moved past lost ones there (docs/adr/027)", st.Reset)
	}
	if st.Imported > 0 {
		tw("imported", "at revision %d", st.Imported)
	}
	tw("live keys", "%d, %s of keys and values", st.LiveKeys, size(float64(st.LiveBytes)))
	tw("hash", "%s (check hash at %d)", st.Hash, st.HashRev)
	tw("history", "%d log rows, %s of keys and values (the live keys' rows included)", st.LogRows, size(float64(st.LogBytes)))
	tw("leases", "%d", st.Leases)
	tw("database", "%s, %s in use", size(float64(st.DBBytes)), size(float64(st.DBBytesInUse)))
	switch {
	case st.Dialect == "sqlite":
		tw("replicas", "none: one server serves a SQLite file")
	case len(st.Servers) == 0:
		tw("replicas", "none announced")
	default:
		tw("replicas", "%d announced, each with the revision it applied (recorded when it moves)", len(st.Servers))
		if st.Dialect == "postgres" {
			tw("", "(on PostgreSQL a server renews its row only while its LISTEN session is down: a live one's may show expired)")
		}
		for _, s := range st.Servers {
			row := "no row"
			if !s.Expires.IsZero() {
				state := "live"
				if s.Expires.Before(now) {
					state = "expired"
				}
				row = fmt.Sprintf("row %s, expires %s", state, s.Expires.Format(time.RFC3339))
			}
			applied := "revision not recorded yet"
			if s.Recorded {
				applied = fmt.Sprintf("revision %d of %d, lag %d, recorded %s ago", s.Applied, s.Revision, s.Lag, time.Duration(s.AgeSeconds*float64(time.Second)).Round(time.Second))
			}
			tw("", "server/%s: %s; %s", s.ID, applied, row)
		}
	}
	return nil
}

// openReader opens the store cfg names read-only beside any server
// (mvcc.Reader), for the command cmd, and returns it with the endpoint
// as errors and output name it (credentials redacted).
func openReader(ctx context.Context, cmd string, cfg endpoint.Config) (*mvcc.Reader, string, error) {
	d, err := endpoint.NewDialect(cfg)
	if err != nil {
		return nil, "", err
	}
	where := endpoint.RedactEndpoint(cfg.Endpoint)
	r, err := mvcc.OpenReader(ctx, d)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %s: %w", cmd, where, err)
	}
	return r, where, nil
}
