package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
)

// The way out to etcd (ADR-051): a store filled with puts, deletes,
// transactions, leases and a compaction, whose last revision is a delete,
// is exported; etcdutl v3.6.16 restores the snapshot (its hash checked)
// and etcd v3.6.16 started on it answers every key as the store did
// (value, create and mod revision, version, lease), at the same header
// revision; the leases are there with their TTL and keys; a read below
// the revision is compacted; etcd's next write is the next revision.
func TestExportEtcdSnapshot(t *testing.T) {
	etcdutl, err := framework.EtcdutlBinary()
	if err != nil {
		framework.Unavailable(t, "etcdutl", err)
	}
	etcd, err := framework.EtcdBinary()
	if err != nil {
		framework.Unavailable(t, "etcd", err)
	}
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		ctx := t.Context()
		x := framework.Start(t, b, framework.Options{})
		cli := x.Client(t)
		leases := fillForExport(t, cli)
		src, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		rev := src.Header.Revision
		if n := len(src.Kvs); n != 192 {
			t.Fatalf("the source holds %d keys, want 192", n)
		}
		srcLeases := leaseState(t, cli, leases)

		dir := t.TempDir()
		file := filepath.Join(dir, "snap.db")
		var out, errs bytes.Buffer
		if err := (ExportCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), "--etcd-snapshot", file}, &out, &errs); err != nil {
			t.Fatalf("export: %v\n%s", err, errs.String())
		}
		t.Log(strings.TrimSpace(out.String()))
		if err := (ExportCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), "--etcd-snapshot", file}, &out, &errs); err == nil || !strings.Contains(err.Error(), "exists") {
			t.Fatalf("export over an existing file: %v, want it refused", err)
		}

		data := filepath.Join(dir, "etcd")
		client, peer := "http://"+framework.FreeAddr(t), "http://"+framework.FreeAddr(t)
		restore := exec.CommandContext(ctx, etcdutl, "snapshot", "restore", file, "--data-dir", data,
			"--name", "default", "--initial-cluster", "default="+peer, "--initial-advertise-peer-urls", peer)
		if o, err := restore.CombinedOutput(); err != nil {
			t.Fatalf("etcdutl snapshot restore: %v\n%s", err, o)
		}
		ecli := startRestoredEtcd(t, etcd, data, client, peer)

		got, err := ecli.Get(ctx, "\x00", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		if got.Header.Revision != rev {
			t.Errorf("etcd's header revision is %d, the store's %d", got.Header.Revision, rev)
		}
		compareKVs(t, src.Kvs, got.Kvs)
		if gotLeases := leaseState(t, ecli, leases); gotLeases != srcLeases {
			t.Errorf("etcd's leases:\n%s\nthe store's:\n%s", gotLeases, srcLeases)
		}
		if _, err := ecli.Get(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithRev(rev-1)); !errors.Is(err, rpctypes.ErrCompacted) {
			t.Errorf("a read at %d, below the snapshot's revision: %v, want %v", rev-1, err, rpctypes.ErrCompacted)
		}
		if _, err := ecli.Get(ctx, "/k/", clientv3.WithPrefix(), clientv3.WithRev(rev)); err != nil {
			t.Errorf("a read at the snapshot's revision %d: %v", rev, err)
		}
		put, err := ecli.Put(ctx, "/after", "x")
		if err != nil {
			t.Fatal(err)
		}
		if put.Header.Revision != rev+1 {
			t.Errorf("etcd's first write is revision %d, want %d", put.Header.Revision, rev+1)
		}
	})
}

// fillForExport writes a history the snapshot must flatten: puts that
// overwrite (versions above 1), deletes, transactions that change several
// keys in one revision, keys with an empty value and with bytes outside
// ASCII, keys on two leases, a compaction, and a last revision that is a
// delete, so that no live key's mod revision is the store's. It returns
// the leases.
func fillForExport(t *testing.T, cli *clientv3.Client) []clientv3.LeaseID {
	t.Helper()
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 600 {
		must(cli.Put(ctx, fmt.Sprintf("/k/%03d", i%200), fmt.Sprintf("v%d", i)))
	}
	for i := 0; i < 200; i += 7 {
		must(cli.Delete(ctx, fmt.Sprintf("/k/%03d", i)))
	}
	for i := 0; i < 200; i += 14 {
		must(cli.Put(ctx, fmt.Sprintf("/k/%03d", i), "again"))
	}
	must(cli.Txn(ctx).Then(
		clientv3.OpPut("/txn/a", "1"), clientv3.OpPut("/txn/b", ""), clientv3.OpPut("/txn/\xff\x00", "\x00\xff"),
		clientv3.OpDelete("/k/001")).Commit())
	must(cli.Compact(ctx, 300))
	var leases []clientv3.LeaseID
	for _, ttl := range []int64{600, 3600} {
		l, err := cli.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l.ID)
		must(cli.Txn(ctx).Then(
			clientv3.OpPut(fmt.Sprintf("/lease/%d/a", ttl), "a", clientv3.WithLease(l.ID)),
			clientv3.OpPut(fmt.Sprintf("/lease/%d/b", ttl), "b", clientv3.WithLease(l.ID))).Commit())
	}
	must(cli.Put(ctx, "/gone", "x"))
	must(cli.Delete(ctx, "/gone"))
	return leases
}

// leaseState is each lease's granted TTL and keys in byte order, as text.
func leaseState(t *testing.T, cli *clientv3.Client, ids []clientv3.LeaseID) string {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		ttl, err := cli.TimeToLive(t.Context(), id, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatal(err)
		}
		// etcd keeps a lease's keys in a map: their order is none.
		slices.SortFunc(ttl.Keys, bytes.Compare)
		fmt.Fprintf(&b, "%x ttl %d keys %q\n", id, ttl.GrantedTTL, ttl.Keys)
	}
	return b.String()
}

// compareKVs fails t on each key etcd answers otherwise than the store.
func compareKVs(t *testing.T, want, got []*mvccpb.KeyValue) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("etcd holds %d keys, the store %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		w, g := want[i], got[i]
		if !bytes.Equal(w.Key, g.Key) || !bytes.Equal(w.Value, g.Value) || w.CreateRevision != g.CreateRevision ||
			w.ModRevision != g.ModRevision || w.Version != g.Version || w.Lease != g.Lease {
			t.Errorf("key %d: etcd has %v, the store %v", i, g, w)
		}
	}
}

// startRestoredEtcd starts etcd on the restored data dir as the member
// the restore made, on its loopback client and peer URLs, and returns a
// client once it answers; it is stopped when t ends.
func startRestoredEtcd(t *testing.T, bin, data, client, peer string) *clientv3.Client {
	t.Helper()
	cmd := exec.Command(bin, "--name", "default", "--data-dir", data,
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--log-level", "warn", "--unsafe-no-fsync")
	var log framework.LogBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("etcd's log:\n%s", log.Tail(4000))
		}
	})
	cli, err := framework.NewClient(client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		_, err := cli.Status(ctx, strings.TrimPrefix(client, "http://"))
		cancel()
		if err == nil {
			return cli
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd on the restored snapshot did not answer: %v\n%s", err, log.Tail(4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}
