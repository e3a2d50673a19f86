package mytest_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/quantyroot/quantykube/test/mytest"
)

// TestThrowawayInstance starts a server, makes a database on it, kills the
// server as a crash would and starts it again.
func TestThrowawayInstance(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := mytest.Open(ctx)
	if err != nil {
		t.Skip(err)
	}
	defer srv.Close()
	dsn, err := mytest.CreateDatabase(ctx, srv.AdminDSN, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(dsn)
	db, err := sql.Open("mysql", "qk@tcp("+u.Host+")"+u.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var version string
	if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("server %s, database %s", version, strings.TrimPrefix(u.Path, "/"))
	if srv.Instance == nil {
		return
	}
	if err := srv.Instance.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Instance.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	if err := mytest.DropDatabase(ctx, srv.AdminDSN, dsn); err != nil {
		t.Fatal(err)
	}
}
