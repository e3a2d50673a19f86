package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/quantyroot/quantykube/test/mytest"
)

// myServer is a throwaway MariaDB (Debian's mariadb-server, started by
// mytest as the tests start theirs) that the mysql targets share: each
// round gets a database of its own on it, as on the PostgreSQL cluster.
type myServer struct {
	in *mytest.Instance
}

// benchMySQL is the run's MariaDB, nil when the mysql targets do not run.
var benchMySQL *myServer

func startMySQL(ctx context.Context) (*myServer, error) {
	in, err := mytest.StartInstance(ctx)
	if err != nil {
		return nil, err
	}
	return &myServer{in: in}, nil
}

func (m *myServer) stop() { m.in.Destroy() }

// url is database db's endpoint in the URL form QuantyKube reads.
func (m *myServer) url(db string) string { return m.in.DSN(db) }

func (m *myServer) createDB(ctx context.Context, name string) error {
	db, err := mytest.Connect(m.in.DSN(""))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "CREATE DATABASE "+name)
	return err
}

// dbSize is the database's tables and indexes on disk, and the free space
// inside their files.
func (m *myServer) dbSize(ctx context.Context, name string) int64 {
	db, err := mytest.Connect(m.in.DSN(""))
	if err != nil {
		return 0
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(ctx, `SELECT CAST(COALESCE(SUM(data_length + index_length + data_free), 0) AS SIGNED) FROM information_schema.tables WHERE table_schema = ?`, name).Scan(&n); err != nil {
		return 0
	}
	return n
}

// pid is mariadbd's, 0 if its pid file cannot be read.
func (m *myServer) pid() int {
	b, err := os.ReadFile(filepath.Join(m.in.Dir, "mariadbd.pid"))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// mysqlTarget is QuantyKube (kine: false) or kine on a fresh database of
// the run's MariaDB, kine in its own endpoint form.
func mysqlTarget(name, bin string, kine bool, extra []string) target {
	t := target{name: name + "/mysql", engine: "mysql"}
	t.start = func(ctx context.Context, dir, db string, port int) (*exec.Cmd, error) {
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		if kine {
			return command(ctx, dir, bin, "--listen-address", listen, "--endpoint", kineForm(benchMySQL.url(db)), "--metrics-bind-address", "0")
		}
		args := append([]string{"serve", "--listen-address", listen, "--endpoint", benchMySQL.url(db)}, extra...)
		return command(ctx, dir, bin, args...)
	}
	return t
}

// kineForm is a mysql:// URL in kine's form, mysql://user@tcp(host)/db.
func kineForm(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	return "mysql://" + u.User.String() + "@tcp(" + u.Host + ")" + u.Path
}
