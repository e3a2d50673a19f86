package mysql

import (
	"strings"
	"testing"
	"time"

	qtls "github.com/quantyroot/quantykube/pkg/tls"
)

// Both of kine's endpoint forms name the same server, user and database;
// the database defaults to kine's; bad endpoints get a message that names
// the forms and never the password.
func TestNewParsesKinesForms(t *testing.T) {
	for _, c := range []struct{ in, user, pass, addr, db string }{
		{"mysql://qk:s3cret@tcp(db.example:3307)/k3s?timeout=5s", "qk", "s3cret", "db.example:3307", "k3s"},
		{"mysql://qk:s3cret@db.example:3307/k3s?timeout=5s", "qk", "s3cret", "db.example:3307", "k3s"},
		{"mysql://qk:p@ss/w@tcp(db:3306)/k3s", "qk", "p@ss/w", "db:3306", "k3s"},
		{"mysql://qk:p%40ss%2Fw%3A@db:3306/k3s", "qk", "p@ss/w:", "db:3306", "k3s"},
		{"mysql://qk@db.example/k3s", "qk", "", "db.example:3306", "k3s"},
		{"mysql://root@tcp(127.0.0.1:3306)/", "root", "", "127.0.0.1:3306", DefaultDatabase},
		{"mysql://root@db", "root", "", "db:3306", DefaultDatabase},
		{"mysql://qk@unix(/run/mysqld/mysqld.sock)/k3s", "qk", "", "/run/mysqld/mysqld.sock", "k3s"},
	} {
		d, err := New(c.in, Options{})
		if err != nil {
			t.Errorf("New(%q): %v", c.in, err)
			continue
		}
		if d.cfg.User != c.user || d.cfg.Passwd != c.pass || d.cfg.Addr != c.addr || d.cfg.DBName != c.db {
			t.Errorf("New(%q): user %q pass %q addr %q db %q, want %q %q %q %q", c.in, d.cfg.User, d.cfg.Passwd, d.cfg.Addr, d.cfg.DBName, c.user, c.pass, c.addr, c.db)
		}
		if !d.cfg.InterpolateParams || !d.cfg.MultiStatements || !d.cfg.ClientFoundRows {
			t.Errorf("New(%q): the batch's settings are off: %+v", c.in, d.cfg)
		}
	}
	if d, _ := New("mysql://qk@db/k3s?timeout=5s", Options{}); d.cfg.Timeout != 5*time.Second {
		t.Errorf("the endpoint's timeout is %v, want 5s", d.cfg.Timeout)
	}
	for _, bad := range []string{"mysql://", "postgres://db/x", "mysql://qk:s3cret@tcp(db:3306)/k3s?timeout=never", "mysql://qk:s3cret@db:3306/k3s?timeout=never", "mysql://qk@db/a.b"} {
		_, err := New(bad, Options{})
		if err == nil {
			t.Errorf("New(%q): no error", bad)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("New(%q): the error quotes the password: %v", bad, err)
		}
	}
	if _, err := New("mysql://qk@db/k3s", Options{TLS: qtls.Config{CAFile: "/nonexistent/ca.pem"}}); err == nil || !strings.Contains(err.Error(), "ca.pem") {
		t.Errorf("a CA file that does not exist: %v", err)
	}
}

// A batch's statements go in packets under the budget, in order, a
// statement larger than the budget alone.
func TestScriptPackets(t *testing.T) {
	var s script
	s.add("START TRANSACTION")
	s.rows("INSERT INTO log VALUES ", "", 4, 100, func(i int) (string, []any) {
		return "(?)", []any{make([]byte, 20)}
	})
	s.add("COMMIT")
	ps := s.packets(100)
	var all []string
	n := 0
	for _, p := range ps {
		all = append(all, p.sql)
		n += len(p.args)
		if strings.Count(p.sql, "?") != len(p.args) {
			t.Errorf("packet %q has %d arguments", p.sql, len(p.args))
		}
	}
	if n != 4 || len(ps) < 2 || !strings.HasPrefix(all[0], "START TRANSACTION") || !strings.HasSuffix(all[len(all)-1], "COMMIT") {
		t.Errorf("packets %q with %d arguments", all, n)
	}
}

// TestDurabilityGap: only the settings under which a commit is durable
// once another session can see it pass without a warning.
func TestDurabilityGap(t *testing.T) {
	for _, tc := range []struct {
		logBin      bool
		sync, flush int64
		warn        string
	}{
		{true, 1, 1, ""},
		{false, 0, 1, "binary log is off"},
		{true, 0, 1, "sync_binlog = 0"},
		{true, 100, 1, "sync_binlog = 100"},
		{true, 1, 2, "innodb_flush_log_at_trx_commit = 2"},
		{false, 0, 0, "innodb_flush_log_at_trx_commit = 0"},
	} {
		got := durabilityGap(tc.logBin, tc.sync, tc.flush)
		if (tc.warn == "") != (got == "") || !strings.Contains(got, tc.warn) {
			t.Errorf("log_bin %v, sync_binlog %d, flush %d: %q, want one naming %q", tc.logBin, tc.sync, tc.flush, got, tc.warn)
		}
	}
}
