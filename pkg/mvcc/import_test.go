package mvcc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/pkg/drivers/sqlite"
	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// importKeys are a source's live keys in key order: two share revision 7
// (etcd writes several keys at one revision), one is on a lease.
var importKeys = []*mvccpb.KeyValue{
	{Key: []byte("/registry/configmaps/default/a"), Value: []byte("a3"), CreateRevision: 4, ModRevision: 9, Version: 3},
	{Key: []byte("/registry/events/default/e"), Value: []byte("ev"), CreateRevision: 7, ModRevision: 7, Version: 1, Lease: 3600},
	{Key: []byte("/registry/leases/kube-node-lease/n"), Value: []byte("l"), CreateRevision: 5, ModRevision: 12, Version: 6},
	{Key: []byte("/registry/pods/default/p"), Value: []byte{}, CreateRevision: 7, ModRevision: 7, Version: 1},
}

func sqliteDSN(t *testing.T) string {
	return "sqlite://" + filepath.Join(t.TempDir(), "s.db")
}

func sqliteDialect(t *testing.T, dsn string) mvcc.Dialect {
	t.Helper()
	d, err := sqlite.New(dsn, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// runImport imports keys, lease 3600 and revision rev into dsn's store.
func runImport(t *testing.T, dsn string, keys []*mvccpb.KeyValue, rev int64) (mvcc.ImportStats, error) {
	t.Helper()
	im, err := mvcc.BeginImport(context.Background(), sqliteDialect(t, dsn), mvcc.ImportOptions{})
	if err != nil {
		return mvcc.ImportStats{}, err
	}
	defer im.Close()
	for _, kv := range keys {
		if err := im.Put(kv); err != nil {
			return im.Stats(), err
		}
	}
	if err := im.Lease(3600, 3600); err != nil {
		return im.Stats(), err
	}
	return im.Commit(rev)
}

func openAt(t *testing.T, dsn string, opts mvcc.Options) *mvcc.Store {
	t.Helper()
	s, err := mvcc.Open(context.Background(), sqliteDialect(t, dsn), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// An imported store answers as the source did at its revision: the same
// keys, revisions, versions and leases, and the revision itself; nothing
// before it (the etcd API says "compacted", History "older than the oldest
// retained revision", on every retention rule); and writes carry on from
// there.
func TestImport(t *testing.T) {
	ctx := context.Background()
	dsn := sqliteDSN(t)
	stats, err := runImport(t, dsn, importKeys, 20)
	if err != nil {
		t.Fatal(err)
	}
	want := mvcc.ImportStats{Keys: 4, KeyBytes: 114, ValueBytes: 5, Leases: 1, Rev: 20}
	if stats != want {
		t.Errorf("stats %+v, want %+v", stats, want)
	}
	s := openAt(t, dsn, mvcc.Options{Retain: time.Hour, RetainPrefixes: []mvcc.RetentionRule{{Prefix: []byte("/registry/leases/"), Retain: 10 * time.Minute}}})
	if s.Rev() != 20 {
		t.Fatalf("revision %d, want 20", s.Rev())
	}
	res, err := s.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rev != 20 || len(res.Kvs) != len(importKeys) {
		t.Fatalf("range: revision %d, %d keys", res.Rev, len(res.Kvs))
	}
	for i, kv := range res.Kvs {
		if !proto.Equal(kv, importKeys[i]) {
			t.Errorf("key %d: %v, want %v", i, kv, importKeys[i])
		}
	}
	if _, err := s.Range(ctx, &pb.RangeRequest{Key: []byte("/registry/pods/default/p"), Revision: 19}); !errors.Is(err, mvcc.ErrCompacted) {
		t.Errorf("range below the import's revision: %v, want %v", err, mvcc.ErrCompacted)
	}
	for _, key := range []string{"/registry/pods/default/p", "/registry/leases/kube-node-lease/n"} {
		var oor *mvcc.OutOfRangeError
		if _, err := s.KeyAt(ctx, []byte(key), 12); !errors.As(err, &oor) {
			t.Errorf("History of %s at 12: %v, want out of range", key, err)
		}
		kv, err := s.KeyAt(ctx, []byte(key), 20)
		if err != nil || kv == nil {
			t.Errorf("History of %s at 20: %v, %v", key, kv, err)
		}
	}
	info, err := s.TimeToLive(ctx, 3600, true)
	if err != nil || info.GrantedTTL != 3600 || len(info.Keys) != 1 || string(info.Keys[0]) != "/registry/events/default/e" {
		t.Errorf("lease 3600: %+v, %v", info, err)
	}
	resp, err := s.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: importKeys[0].Key, Value: []byte("a4"), PrevKv: true}}}}})
	if err != nil {
		t.Fatal(err)
	}
	after, err := s.Range(ctx, &pb.RangeRequest{Key: importKeys[0].Key})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Revision != 21 || after.Kvs[0].CreateRevision != 4 || after.Kvs[0].Version != 4 {
		t.Errorf("a put after the import: revision %d, kv %v", resp.Header.Revision, after.Kvs[0])
	}
}

// A target that has a key, or that holds an import already, is refused and
// left as it was.
func TestImportRefusesANonEmptyStore(t *testing.T) {
	dsn := sqliteDSN(t)
	s := openAt(t, dsn, mvcc.Options{})
	put(t, s, "/k", []byte("v"))
	s.Close()
	if _, err := runImport(t, dsn, importKeys, 20); err == nil || !strings.Contains(err.Error(), "not empty (revision 2, 1 keys, 1 log rows, 0 leases)") {
		t.Fatalf("import into a store with a key: %v", err)
	}
	if s := openAt(t, dsn, mvcc.Options{}); s.Rev() != 2 {
		t.Fatalf("revision %d after a refused import, want 2", s.Rev())
	}

	dsn = sqliteDSN(t)
	if _, err := runImport(t, dsn, nil, 1); err != nil {
		t.Fatalf("import of an empty source: %v", err)
	}
	if _, err := runImport(t, dsn, importKeys, 20); err == nil || !strings.Contains(err.Error(), "holds an import already") {
		t.Fatalf("second import: %v", err)
	}
}

// A SQLite file that holds another program's tables (kine's state.db, as
// --endpoint by mistake) is refused before the import writes to it: no
// QuantyKube table appears beside kine's.
func TestImportRefusesAForeignDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE kine (id INTEGER PRIMARY KEY, name TEXT)`); err != nil {
		t.Fatal(err)
	}
	_, err = runImport(t, "sqlite://"+path, importKeys, 20)
	if err == nil || !strings.Contains(err.Error(), "holds tables that are not QuantyKube's (kine)") {
		t.Fatalf("import into kine's database: %v", err)
	}
	var names string
	if err := db.QueryRow(`SELECT group_concat(name) FROM sqlite_master WHERE type = 'table'`).Scan(&names); err != nil || names != "kine" {
		t.Errorf("tables after the refused import: %q, %v; want only kine", names, err)
	}
}

// What Import refuses, in a dry run and for real; a refused import leaves
// the store empty.
func TestImportChecks(t *testing.T) {
	kv := func(key string, create, mod, version, lease int64) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte(key), Value: []byte("v"), CreateRevision: create, ModRevision: mod, Version: version, Lease: lease}
	}
	cases := []struct {
		want string
		keys []*mvccpb.KeyValue
		rev  int64
	}{
		{"keys must come once each, in ascending order", []*mvccpb.KeyValue{kv("/b", 2, 2, 1, 0), kv("/a", 3, 3, 1, 0)}, 5},
		{"keys must come once each, in ascending order", []*mvccpb.KeyValue{kv("/a", 2, 2, 1, 0), kv("/a", 3, 3, 1, 0)}, 5},
		{"a key is empty", []*mvccpb.KeyValue{kv("", 2, 2, 1, 0)}, 5},
		{"want 1 <= create <= mod", []*mvccpb.KeyValue{kv("/a", 4, 3, 1, 0)}, 5},
		{"want 1 <= create <= mod", []*mvccpb.KeyValue{kv("/a", 0, 3, 1, 0)}, 5},
		{"version is at least 1", []*mvccpb.KeyValue{kv("/a", 2, 3, 0, 0)}, 5},
		{"older than a key's mod revision 9", []*mvccpb.KeyValue{kv("/a", 2, 9, 1, 0)}, 8},
		{"attached to lease 77, which was not imported", []*mvccpb.KeyValue{kv("/a", 2, 3, 1, 77)}, 5},
	}
	for _, c := range cases {
		for _, dry := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dry=%v", c.want, dry), func(t *testing.T) {
				var d mvcc.Dialect
				dsn := sqliteDSN(t)
				if !dry {
					d = sqliteDialect(t, dsn)
				}
				im, err := mvcc.BeginImport(context.Background(), d, mvcc.ImportOptions{DryRun: dry})
				if err != nil {
					t.Fatal(err)
				}
				defer im.Close()
				for _, kv := range c.keys {
					if err = im.Put(kv); err != nil {
						break
					}
				}
				if err == nil {
					_, err = im.Commit(c.rev)
				}
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("error %v, want one containing %q", err, c.want)
				}
				if !dry {
					im.Close()
					if s := openAt(t, dsn, mvcc.Options{}); s.Rev() != 1 {
						t.Fatalf("revision %d after a failed import, want 1", s.Rev())
					}
				}
			})
		}
	}
}

// A dry run checks and counts what a real import writes, and writes nothing.
func TestImportDryRun(t *testing.T) {
	im, err := mvcc.BeginImport(context.Background(), nil, mvcc.ImportOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range importKeys {
		if err := im.Put(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := im.Lease(3600, 3600); err != nil {
		t.Fatal(err)
	}
	stats, err := im.Commit(20)
	if err != nil {
		t.Fatal(err)
	}
	if real, err := runImport(t, sqliteDSN(t), importKeys, 20); err != nil || real != stats {
		t.Fatalf("dry run %+v, import %+v (%v)", stats, real, err)
	}
}
