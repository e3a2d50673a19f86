package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/pkg/endpoint"
	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
	"github.com/quantyroot/quantykube/test/pgtest"
)

func TestMain(m *testing.M) { framework.Main(m) }

// TestEmbedLikeK3s runs the program on each database and then holds what
// kube-apiserver's storage reported against the database itself.
func TestEmbedLikeK3s(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		dir := t.TempDir()
		dsn := ""
		switch b {
		case framework.Postgres:
			dsn = postgresDatabase(t)
		case framework.MySQL:
			dsn = framework.MySQLDatabase(t)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var out bytes.Buffer
		res, err := run(ctx, dir, dsn, &out)
		t.Logf("k3sembed:\n%s", out.String())
		if err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, "kine.sock")
		if want := []string{"unix://" + sock}; len(res.etcd.Endpoints) != 1 || res.etcd.Endpoints[0] != want[0] {
			t.Errorf("endpoints %v, want %v", res.etcd.Endpoints, want)
		}
		// Several servers may share PostgreSQL or MySQL: their controllers
		// must elect a leader, as kine tells k3s.
		if res.etcd.LeaderElect != b.IsShared() {
			t.Errorf("LeaderElect = %v on %s", res.etcd.LeaderElect, b)
		}
		if !(res.revs[0] < res.revs[1] && res.revs[1] < res.revs[2]) {
			t.Fatalf("resourceVersions %v do not increase", res.revs)
		}

		// The store, reopened after the program stopped it, holds exactly
		// what kube-apiserver's storage was told.
		if dsn == "" {
			dsn = "sqlite://" + filepath.Join(dir, "state.db")
		}
		store, err := endpoint.OpenStore(ctx, endpoint.Config{Endpoint: dsn})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if rev := store.Rev(); rev != int64(res.revs[2]) {
			t.Errorf("store at revision %d after the program, its last resourceVersion was %d", rev, res.revs[2])
		}
		key := []byte("/registry/configmaps/default/demo")
		got, err := store.Range(ctx, &pb.RangeRequest{Key: key})
		if err != nil || len(got.Kvs) != 0 {
			t.Fatalf("deleted configmap still readable: %v %v", got, err)
		}
		page, err := store.Log(ctx, mvcc.LogQuery{Range: mvcc.NewKeyRange(key, nil), Limit: 10, MaxBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []mvccpb.Event_EventType
		var revs []int64
		for _, e := range page.Events {
			kinds = append(kinds, e.Type)
			revs = append(revs, e.Rev())
		}
		if len(kinds) != 3 || kinds[0] != mvccpb.PUT || kinds[1] != mvccpb.PUT || kinds[2] != mvccpb.DELETE ||
			revs[0] != int64(res.revs[0]) || revs[1] != int64(res.revs[1]) {
			t.Fatalf("history of the configmap: %v at %v, want PUT PUT DELETE with the first two at %v", kinds, revs, res.revs[:2])
		}
	})
}

func postgresDatabase(t *testing.T) string {
	t.Helper()
	srv, err := framework.PostgresServer()
	if err != nil {
		framework.Unavailable(t, "PostgreSQL", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn, err := pgtest.CreateDatabase(ctx, srv.AdminDSN, "k3sembed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = pgtest.DropDatabase(ctx, srv.AdminDSN, dsn)
	})
	return dsn
}

// The unix socket is the whole datastore: only its owner may connect.
func TestSocketIsPrivate(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// A bare path is a SQLite file, as kine's default endpoint is.
	if _, err := endpoint.Listen(ctx, endpoint.Config{Listener: "unix://" + filepath.Join(dir, "kine.sock"), Endpoint: filepath.Join(dir, "state.db"), WaitGroup: &wg}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "kine.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", st.Mode().Perm())
	}
}
