package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/mytest"
)

func TestMain(m *testing.M) { framework.Main(m) }

// model is what a test wrote to a source, key by key, as the answers to
// its writes reported it: what the import must reproduce.
type model struct {
	t    *testing.T
	cli  *clientv3.Client
	keys map[string]*mvccpb.KeyValue
	// ttl is the TTL of each lease the test granted.
	ttl map[int64]int64
}

func newModel(t *testing.T, cli *clientv3.Client) *model {
	return &model{t: t, cli: cli, keys: map[string]*mvccpb.KeyValue{}, ttl: map[int64]int64{}}
}

func (m *model) ctx() context.Context {
	ctx, cancel := context.WithTimeout(m.t.Context(), 30*time.Second)
	m.t.Cleanup(cancel)
	return ctx
}

// put creates or updates key as kube-apiserver does: a Txn conditional on
// the mod revision it last saw (0: absent), which is all kine accepts.
func (m *model) put(key, value string, lease clientv3.LeaseID) {
	m.t.Helper()
	prev := m.keys[key]
	var mod int64
	if prev != nil {
		mod = prev.ModRevision
	}
	resp, err := m.cli.Txn(m.ctx()).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", mod)).
		Then(clientv3.OpPut(key, value, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil || !resp.Succeeded {
		m.t.Fatalf("put %s: succeeded %v, %v", key, resp != nil && resp.Succeeded, err)
	}
	rev := resp.Header.Revision
	kv := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(value), CreateRevision: rev, ModRevision: rev, Version: 1, Lease: int64(lease)}
	if prev != nil {
		kv.CreateRevision, kv.Version = prev.CreateRevision, prev.Version+1
	}
	m.keys[key] = kv
}

// del deletes key as kube-apiserver does.
func (m *model) del(key string) {
	m.t.Helper()
	resp, err := m.cli.Txn(m.ctx()).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", m.keys[key].ModRevision)).
		Then(clientv3.OpDelete(key)).
		Else(clientv3.OpGet(key)).Commit()
	if err != nil || !resp.Succeeded {
		m.t.Fatalf("delete %s: %v", key, err)
	}
	delete(m.keys, key)
}

// compact is kube-apiserver's compaction Txn on compact_rev_key, which
// kine keeps under a name of its own with its version in the value.
func (m *model) compact(version int64, value string) {
	m.t.Helper()
	resp, err := m.cli.Txn(m.ctx()).
		If(clientv3.Compare(clientv3.Version("compact_rev_key"), "=", version)).
		Then(clientv3.OpPut("compact_rev_key", value)).
		Else(clientv3.OpGet("compact_rev_key")).Commit()
	if err != nil || !resp.Succeeded {
		m.t.Fatalf("compact_rev_key at version %d: %v", version, err)
	}
	kv := &mvccpb.KeyValue{Key: []byte("compact_rev_key"), Value: []byte(value), CreateRevision: resp.Header.Revision, ModRevision: resp.Header.Revision, Version: version + 1}
	if prev := m.keys["compact_rev_key"]; prev != nil {
		kv.CreateRevision = prev.CreateRevision
	}
	m.keys["compact_rev_key"] = kv
}

func (m *model) grant(ttl int64) clientv3.LeaseID {
	m.t.Helper()
	l, err := m.cli.Grant(m.ctx(), ttl)
	if err != nil {
		m.t.Fatal(err)
	}
	m.ttl[int64(l.ID)] = ttl
	return l.ID
}

// writeK3sShaped writes what a small cluster's datastore holds: objects
// created, updated several times, deleted and created again, Events on a
// lease, a large value, and kube-apiserver's compaction key.
func (m *model) writeK3sShaped() {
	events := m.grant(3600)
	for i := range 6 {
		m.put(fmt.Sprintf("/registry/pods/default/web-%d", i), fmt.Sprintf(`{"kind":"Pod","v":0,"i":%d}`, i), 0)
	}
	m.put("/registry/configmaps/kube-system/big", strings.Repeat("x", 300<<10), 0)
	m.compact(0, "5")
	for v := 1; v <= 3; v++ {
		for i := range 3 {
			m.put(fmt.Sprintf("/registry/pods/default/web-%d", i), fmt.Sprintf(`{"kind":"Pod","v":%d,"i":%d}`, v, i), 0)
		}
		m.put(fmt.Sprintf("/registry/events/default/web-0.%d", v), `{"kind":"Event"}`, events)
	}
	m.del("/registry/pods/default/web-4")
	m.del("/registry/pods/default/web-5")
	m.put("/registry/pods/default/web-5", `{"kind":"Pod","again":true}`, 0)
	m.put("/registry/leases/kube-node-lease/node-1", `{"kind":"Lease"}`, 0)
	m.put("/registry/leases/kube-node-lease/node-1", `{"kind":"Lease","renew":1}`, 0)
	m.compact(1, "12")
}

// revision is the source's revision as its etcd API reports it.
func (m *model) revision() int64 {
	m.t.Helper()
	resp, err := m.cli.Get(m.ctx(), "compact_rev_key")
	if err != nil {
		m.t.Fatal(err)
	}
	return resp.Header.Revision
}

// check reads every key of the model back from cli and finds exactly the
// model, at revision rev, and nothing below rev.
func (m *model) check(cli *clientv3.Client, rev int64) {
	m.t.Helper()
	ctx := m.ctx()
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		m.t.Fatal(err)
	}
	if resp.Header.Revision != rev {
		m.t.Errorf("revision %d, want the source's %d", resp.Header.Revision, rev)
	}
	got := map[string]*mvccpb.KeyValue{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = kv
	}
	for key, want := range m.keys {
		kv := got[key]
		switch {
		case kv == nil:
			m.t.Errorf("%s: missing", key)
		case !bytes.Equal(kv.Value, want.Value) || kv.CreateRevision != want.CreateRevision || kv.ModRevision != want.ModRevision || kv.Version != want.Version || kv.Lease != want.Lease:
			m.t.Errorf("%s: create %d mod %d version %d lease %x value %.40q; want create %d mod %d version %d lease %x value %.40q",
				key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease, kv.Value, want.CreateRevision, want.ModRevision, want.Version, want.Lease, want.Value)
		}
		delete(got, key)
	}
	for key := range got {
		m.t.Errorf("%s: imported, but not in the source", key)
	}
	for id, ttl := range m.ttl {
		l, err := cli.TimeToLive(ctx, clientv3.LeaseID(id), clientv3.WithAttachedKeys())
		if err != nil || l.GrantedTTL != ttl || len(l.Keys) != 3 {
			m.t.Errorf("lease %x: granted TTL %d, %d keys, %v; want TTL %d and the 3 Events", id, l.GrantedTTL, len(l.Keys), err, ttl)
		}
	}
	if _, err := cli.Get(ctx, "/registry/pods/default/web-0", clientv3.WithRev(rev-1)); !errors.Is(err, rpctypes.ErrCompacted) {
		m.t.Errorf("read below the imported revision: %v, want %v", err, rpctypes.ErrCompacted)
	}
	put, err := cli.Put(ctx, "/registry/pods/default/web-0", "after")
	if err != nil || put.Header.Revision != rev+1 {
		m.t.Errorf("the first write after the import: revision %d, %v; want %d", put.Header.Revision, err, rev+1)
	}
}

func runImportCmd(t *testing.T, args ...string) (stdout string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	err = ImportCommand{}.Run(ctx, args, &out, &errb)
	t.Logf("quantykube import %s:\n%s%s", strings.Join(args, " "), out.String(), errb.String())
	return out.String(), err
}

// emptyTarget is a QuantyKube store on b, started once (so it has its
// schema, at revision 1) and stopped, for an import to fill.
func emptyTarget(t *testing.T, b framework.Backend) *framework.Target {
	x := framework.Start(t, b, framework.Options{})
	x.Stop(t)
	return x
}

// Keys, several revisions, deletes and leases written through a real kine
// v0.17.5 (on SQLite, PostgreSQL and MariaDB) are imported into QuantyKube on
// the same database kind: every key reads back through the etcd client
// with kine's create and mod revisions and values, at kine's revision;
// kine's own rows are left out; the source is not written.
func TestImportFromKine(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		dsn := "sqlite://" + filepath.Join(t.TempDir(), "state.db")
		switch b {
		case framework.Postgres:
			dsn = framework.PostgresDatabase(t)
		case framework.MySQL:
			// kine's own form, which kine and the import both read.
			dsn = mytest.KineDSN(framework.MySQLDatabase(t))
		}
		kine := framework.StartKine(t, dsn)
		m := newModel(t, kine.Client(t))
		m.writeK3sShaped()
		rev := m.revision()
		kine.Stop(t)
		before := sourceDigest(t, dsn)

		target := emptyTarget(t, b)
		dry, err := runImportCmd(t, "--from", dsn, "--dry-run")
		if err != nil {
			t.Fatal(err)
		}
		out, err := runImportCmd(t, "--from", dsn, "--endpoint", target.DSN())
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			fmt.Sprintf("revision  %d\n", rev),
			fmt.Sprintf("keys      %d ", len(m.keys)),
			"leases    1\n",
			"skipped   1: kine's compaction marker (compact_rev_key)\n",
			"skipped   1: kine's health key (/registry/health)\n",
		} {
			if !strings.Contains(out, want) || !strings.Contains(dry, want) {
				t.Errorf("report lacks %q", want)
			}
		}
		if after := sourceDigest(t, dsn); after != before {
			t.Errorf("the import changed the source: %s, then %s", before, after)
		}
		target.Start(t)
		m.check(target.Client(t), rev)
	})
}

// A running etcd's keys, read at one revision, are imported into
// QuantyKube with their revisions and versions, several keys changed by one
// Txn included, and its leases with their TTLs.
func TestImportFromEtcd(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		etcd := framework.Start(t, framework.Etcd, framework.Options{})
		cli := etcd.Client(t)
		m := newModel(t, cli)
		m.writeK3sShaped()
		// Two keys at one revision.
		resp, err := cli.Txn(m.ctx()).Then(clientv3.OpPut("/registry/a", "1"), clientv3.OpPut("/registry/b", "2")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range map[string]string{"/registry/a": "1", "/registry/b": "2"} {
			rev := resp.Header.Revision
			m.keys[k] = &mvccpb.KeyValue{Key: []byte(k), Value: []byte(v), CreateRevision: rev, ModRevision: rev, Version: 1}
		}
		rev := m.revision()

		target := emptyTarget(t, b)
		out, err := runImportCmd(t, "--from", "etcd://"+strings.TrimPrefix(etcd.Endpoint(), "http://"), "--endpoint", target.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, fmt.Sprintf("revision  %d\n", rev)) || strings.Contains(out, "skipped") {
			t.Errorf("report:\n%s", out)
		}
		target.Start(t)
		m.check(target.Client(t), rev)
	})
}

// A target that is not empty is refused, and keeps what it had.
func TestImportRefusesAStoreInUse(t *testing.T) {
	etcd := framework.Start(t, framework.Etcd, framework.Options{})
	if _, err := etcd.Client(t).Put(t.Context(), "/k", "v"); err != nil {
		t.Fatal(err)
	}
	target := framework.Start(t, framework.SQLite, framework.Options{})
	if _, err := target.Client(t).Put(t.Context(), "/mine", "v"); err != nil {
		t.Fatal(err)
	}
	// While the server runs, SQLite's lock refuses the import.
	_, err := runImportCmd(t, "--from", etcd.Endpoint(), "--endpoint", target.DSN())
	if err == nil || !strings.Contains(err.Error(), "another QuantyKube server has this database open") {
		t.Fatalf("import into a served store: %v", err)
	}
	target.Stop(t)
	_, err = runImportCmd(t, "--from", etcd.Endpoint(), "--endpoint", target.DSN())
	if err == nil || !strings.Contains(err.Error(), "the target is not empty (revision 2, 1 keys") {
		t.Fatalf("import into a store with a key: %v", err)
	}
	target.Start(t)
	resp, err := target.Client(t).Get(t.Context(), "/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "/mine" || resp.Header.Revision != 2 {
		t.Fatalf("the refused target: %v, %v", resp, err)
	}
}

// A target that is the source, by the same name, another name or a copy,
// is refused, and neither is written: the copy holds kine's table, which
// no store has.
func TestImportRefusesItsSource(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.db")
	kine := framework.StartKine(t, "sqlite://"+path)
	if _, err := kine.Client(t).Put(t.Context(), "/registry/k", "v"); err != nil {
		t.Fatal(err)
	}
	kine.Stop(t)
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "copy.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{path: sourceDigest(t, "sqlite://"+path), cp: sourceDigest(t, "sqlite://"+cp)}
	for target, want := range map[string]string{
		"sqlite://" + path: "--endpoint names the database --from reads",
		link:               "--endpoint names the database --from reads",
		"sqlite://" + cp:   "holds tables that are not QuantyKube's (kine)",
	} {
		if _, err := runImportCmd(t, "--from", path, "--endpoint", target); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("import from %s into %s: %v, want an error containing %q", path, target, err, want)
		}
	}
	for p, digest := range before {
		if after := sourceDigest(t, "sqlite://"+p); after != digest {
			t.Errorf("a refused import changed %s", p)
		}
	}
}

// sourceDigest sums what the import must not change: a SQLite file's
// bytes, or a kine table's rows.
func sourceDigest(t *testing.T, dsn string) string {
	t.Helper()
	if path, ok := strings.CutPrefix(dsn, "sqlite://"); ok {
		h := sha256.New()
		for _, p := range []string{path, path + "-wal"} {
			b, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			h.Write(b)
		}
		return fmt.Sprintf("%x", h.Sum(nil))
	}
	if strings.HasPrefix(dsn, "mysql://") {
		return mysqlDigest(t, dsn)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var digest string
	err = db.QueryRowContext(t.Context(), `SELECT md5(string_agg(id::text || name || coalesce(encode(value, 'hex'), '') || deleted::text, ',' ORDER BY id)) FROM kine`).Scan(&digest)
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

// mysqlDigest is sourceDigest of kine's table on MySQL.
func mysqlDigest(t *testing.T, dsn string) string {
	t.Helper()
	db, err := mytest.Connect(mytest.URLOfKineDSN(dsn))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.QueryContext(t.Context(), `SELECT id, name, value, deleted FROM kine ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	h := sha256.New()
	for rows.Next() {
		var id, deleted int64
		var name string
		var value []byte
		if err := rows.Scan(&id, &name, &value, &deleted); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%d|%s|%x|%d,", id, name, value, deleted)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

// On a terminal, progress rewrites one line, a few times a second at most,
// and is erased at the end; elsewhere it writes nothing.
func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	p := &progress{w: &buf, what: "importing", on: true, now: func() time.Time { return now }}
	p.update(func() string { return "1 keys" })
	now = now.Add(100 * time.Millisecond)
	p.update(func() string { return "2 keys" })
	now = now.Add(100 * time.Millisecond)
	p.update(func() string { return "3 keys" })
	p.done()
	if want := "\r\x1b[Kimporting: 1 keys\r\x1b[Kimporting: 3 keys\r\x1b[K"; buf.String() != want {
		t.Errorf("progress wrote %q, want %q", buf.String(), want)
	}
	buf.Reset()
	p = newProgress(&buf, "importing")
	p.update(func() string { return "1 keys" })
	p.done()
	if buf.Len() != 0 {
		t.Errorf("progress on a buffer (not a terminal) wrote %q", buf.String())
	}
}
