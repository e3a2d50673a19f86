// Package mytest gives tests a MariaDB (or MySQL) to run QuantyKube on:
// QUANTY_TEST_MYSQL_DSN when set (a mysql:// URL whose user may CREATE
// DATABASE), otherwise a throwaway server (mariadb-install-db and mariadbd
// in a temporary directory, run as the mysql user when the test runs as
// root, listening on 127.0.0.1 only) when Debian's mariadb-server is
// installed. Each test gets a fresh database of its own.
package mytest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/quantyroot/quantykube/test/reaper"
)

// EnvDSN names an existing server to test against.
const EnvDSN = "QUANTY_TEST_MYSQL_DSN"

// Where Debian's mariadb-server puts its programs.
const (
	DefaultServer  = "/usr/sbin/mariadbd"
	DefaultInstall = "/usr/bin/mariadb-install-db"
)

// ErrUnavailable means there is no DSN and no server binaries.
var ErrUnavailable = errors.New("no MariaDB: " + EnvDSN + " is unset and there is no " + DefaultServer + " (apt-get install mariadb-server)")

// Server is a MariaDB or MySQL to create test databases on.
type Server struct {
	// AdminDSN is a mysql:// URL, without a database, of a user that may
	// create databases.
	AdminDSN string
	// Instance is set when this process started the server (and may kill
	// and start it).
	Instance *Instance
}

// Instance is a throwaway MariaDB server.
type Instance struct {
	Dir  string
	Port int
	uid  int // run as this user (-1: as ourselves)
	gid  int
	cmd  *exec.Cmd
	done chan struct{}
	// reaper removes the instance if this process ends without Destroy.
	reaper *reaper.Reaper
	// tls: the server has certificate files in Dir and serves TLS only.
	tls bool
}

// installTLS copies t's files into the instance's directory, readable by
// the server's user only.
func (in *Instance) installTLS(t TLSFiles) error {
	for _, f := range [][2]string{{t.CA, "ca.pem"}, {t.Cert, "server.pem"}, {t.Key, "server-key.pem"}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			return fmt.Errorf("mytest: TLS file: %w", err)
		}
		dst := filepath.Join(in.Dir, f[1])
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return fmt.Errorf("mytest: TLS file: %w", err)
		}
		if in.uid >= 0 {
			if err := os.Chown(dst, in.uid, in.gid); err != nil {
				return fmt.Errorf("mytest: TLS file: %w", err)
			}
		}
	}
	in.tls = true
	return nil
}

// Open returns the server to test on: the DSN from the environment, or a
// new throwaway instance (the caller must Close it).
func Open(ctx context.Context) (*Server, error) {
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		return &Server{AdminDSN: dsn}, nil
	}
	if _, err := os.Stat(DefaultServer); err != nil {
		return nil, ErrUnavailable
	}
	in, err := StartInstance(ctx)
	if err != nil {
		return nil, err
	}
	return &Server{AdminDSN: in.DSN(""), Instance: in}, nil
}

// Close stops the instance this process started, if any, and removes it.
func (s *Server) Close() {
	if s.Instance != nil {
		s.Instance.Destroy()
	}
}

// StartInstance initializes a data directory in a new temporary directory
// and starts mariadbd on it, on a free port of 127.0.0.1. A reaper removes
// it when this process ends.
func StartInstance(ctx context.Context) (*Instance, error) { return startInstance(ctx, true, nil) }

// TLSFiles are the server's certificate and key, and the CA its clients'
// certificates are verified with.
type TLSFiles struct {
	CA, Cert, Key string
}

// StartInstanceTLS is StartInstance serving TLS only
// (require_secure_transport) with the files of t, copied into the
// instance's directory for the server's user to read.
func StartInstanceTLS(ctx context.Context, t TLSFiles) (*Instance, error) {
	return startInstance(ctx, true, &t)
}

// StartDetached is StartInstance for a script (scripts/conformance.sh):
// the server outlives this process, until Attach(dir).Destroy().
func StartDetached(ctx context.Context) (*Instance, error) { return startInstance(ctx, false, nil) }

// Attach is the instance a detached one left in dir, to Destroy.
func Attach(dir string) *Instance { return &Instance{Dir: dir, uid: -1, gid: -1} }

func startInstance(ctx context.Context, reap bool, tlsFiles *TLSFiles) (*Instance, error) {
	in := &Instance{uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		// mariadbd refuses to run as root unless told to.
		u, err := user.Lookup("mysql")
		if err != nil {
			return nil, fmt.Errorf("mytest: running as root and there is no mysql user: %w", err)
		}
		in.uid, _ = strconv.Atoi(u.Uid)
		in.gid, _ = strconv.Atoi(u.Gid)
	}
	dir, err := os.MkdirTemp("", "quanty-my-")
	if err != nil {
		return nil, err
	}
	in.Dir = dir
	if reap {
		if err := in.reapOnExit(); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		in.Destroy()
		return nil, err
	}
	if in.uid >= 0 {
		if err := os.Chown(dir, in.uid, in.gid); err != nil {
			in.Destroy()
			return nil, err
		}
	}
	args := []string{"--no-defaults", "--datadir=" + in.data(), "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}
	if in.uid >= 0 {
		args = append(args, "--user=mysql")
	}
	if tlsFiles != nil {
		if err := in.installTLS(*tlsFiles); err != nil {
			in.Destroy()
			return nil, err
		}
	}
	cmd := exec.CommandContext(ctx, DefaultInstall, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		in.Destroy()
		return nil, fmt.Errorf("mytest: mariadb-install-db: %v\n%s", err, tail(string(out), 2000))
	}
	for range 5 {
		if in.Port, err = freePort(); err != nil {
			break
		}
		if err = in.Start(ctx); err == nil {
			err = in.grant(ctx)
			if err == nil {
				return in, nil
			}
		}
	}
	in.Destroy()
	return nil, err
}

func (in *Instance) data() string   { return filepath.Join(in.Dir, "data") }
func (in *Instance) socket() string { return filepath.Join(in.Dir, "mysqld.sock") }
func (in *Instance) pidFile() string {
	return filepath.Join(in.Dir, "mariadbd.pid")
}

// Start starts the server (again) and waits until it accepts connections.
// The settings are those the docs ask of a server QuantyKube uses
// (docs/mysql.md): max_allowed_packet above etcd's largest request, and
// commits durable once acknowledged (innodb_flush_log_at_trx_commit) and
// once visible to other sessions (the binary log, synced at each commit),
// which the crash tests rely on.
func (in *Instance) Start(ctx context.Context) error {
	args := []string{"--no-defaults", "--datadir=" + in.data(), "--socket=" + in.socket(),
		"--port=" + strconv.Itoa(in.Port), "--bind-address=127.0.0.1", "--pid-file=" + in.pidFile(),
		"--log-error=" + filepath.Join(in.Dir, "error.log"), "--skip-name-resolve",
		"--max-connections=600", "--max-allowed-packet=64M", "--innodb-buffer-pool-size=128M",
		"--innodb-log-file-size=64M", "--innodb-flush-log-at-trx-commit=1", "--log-bin=" + filepath.Join(in.Dir, "binlog"), "--sync-binlog=1", "--binlog-format=ROW",
		"--performance-schema=OFF", "--character-set-server=utf8mb4", "--collation-server=utf8mb4_bin"}
	if in.tls {
		args = append(args, "--ssl-ca="+filepath.Join(in.Dir, "ca.pem"), "--ssl-cert="+filepath.Join(in.Dir, "server.pem"),
			"--ssl-key="+filepath.Join(in.Dir, "server-key.pem"), "--require-secure-transport=ON")
	}
	if in.uid >= 0 {
		args = append(args, "--user=mysql")
	}
	cmd := exec.Command(DefaultServer, args...)
	cmd.Dir = in.Dir
	// A group of its own: a signal to the test's group does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("mytest: start mariadbd: %w", err)
	}
	in.cmd, in.done = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); close(done) }(in.done)
	deadline := time.Now().Add(60 * time.Second)
	for {
		db, err := sql.Open("mysql", "root@unix("+in.socket()+")/")
		if err == nil {
			err = db.PingContext(ctx)
			db.Close()
		}
		if err == nil {
			return nil
		}
		select {
		case <-in.done:
			log, _ := os.ReadFile(filepath.Join(in.Dir, "error.log"))
			return fmt.Errorf("mytest: mariadbd exited: %s", tail(string(log), 2000))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = in.Kill()
			log, _ := os.ReadFile(filepath.Join(in.Dir, "error.log"))
			return fmt.Errorf("mytest: mariadbd did not accept connections within 60s: %v\n%s", err, tail(string(log), 2000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// grant makes the user the tests connect as over TCP: root has only
// localhost, which is the socket.
func (in *Instance) grant(ctx context.Context) error {
	db, err := sql.Open("mysql", "root@unix("+in.socket()+")/")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		`CREATE USER IF NOT EXISTS 'qk'@'127.0.0.1'`,
		`GRANT ALL PRIVILEGES ON *.* TO 'qk'@'127.0.0.1' WITH GRANT OPTION`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mytest: %s: %w", q, err)
		}
	}
	return nil
}

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (in *Instance) Kill() error {
	if in.cmd == nil {
		return in.killByPIDFile()
	}
	err := in.cmd.Process.Kill()
	<-in.done
	in.cmd = nil
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("mytest: kill mariadbd: %w", err)
	}
	return nil
}

// killByPIDFile kills the mariadbd of an attached instance, named by its
// pid file while that process is a mariadbd (a crash may leave a pid file
// whose number another process reuses).
func (in *Instance) killByPIDFile() error {
	b, err := os.ReadFile(in.pidFile())
	if err != nil {
		return nil
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err != nil || !strings.Contains(string(cmdline), "mariadbd") {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for range 100 {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("mytest: mariadbd %d outlived SIGKILL for 10 s", pid)
}

// Stop shuts the server down cleanly (SIGTERM) and waits for it.
func (in *Instance) Stop() error {
	if in.cmd == nil {
		return nil
	}
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.done:
	case <-time.After(60 * time.Second):
		return in.Kill()
	}
	in.cmd = nil
	return nil
}

// Destroy kills the server and removes its directory.
func (in *Instance) Destroy() {
	_ = in.Kill()
	os.RemoveAll(in.Dir)
	in.reaper.Close() // the reaper finds nothing left and ends
	in.reaper = nil
}

// reapOnExit starts the instance's reaper (test/reaper): once this
// process has ended without Destroy (go test's timeout, a signal), it
// kills mariadbd, which runs in a process group of its own, and removes
// the instance's directory.
func (in *Instance) reapOnExit() error {
	r, err := reaper.Start(reaper.Server{Dir: in.Dir, PIDFile: in.pidFile(), Name: "mariadbd", Signal: "KILL"})
	if err != nil {
		return fmt.Errorf("mytest: the instance's %w", err)
	}
	in.reaper = r
	return nil
}

// DSN is a mysql:// URL of database db (none when empty) over 127.0.0.1.
func (in *Instance) DSN(db string) string {
	return fmt.Sprintf("mysql://qk@127.0.0.1:%d/%s", in.Port, db)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

var dbSeq atomic.Int64

// CreateDatabase makes a new empty database and returns its mysql:// URL.
func CreateDatabase(ctx context.Context, adminDSN, prefix string) (string, error) {
	db, u, err := admin(adminDSN)
	if err != nil {
		return "", err
	}
	defer db.Close()
	name := fmt.Sprintf("qk_%s_%d_%d_%d", sanitize(prefix), os.Getpid(), time.Now().UnixNano()%1e9, dbSeq.Add(1))
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("mytest: create database: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

// DropDatabase removes a database made by CreateDatabase (best effort).
func DropDatabase(ctx context.Context, adminDSN, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	db, _, err := admin(adminDSN)
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+strings.TrimPrefix(u.Path, "/"))
	return err
}

// Connect opens a plain connection pool (multi-statements allowed) to the
// database of a mysql://user:password@host:port/db URL, such as
// CreateDatabase's: a test's own look at the database.
func Connect(dsn string) (*sql.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme != "mysql" {
		return nil, fmt.Errorf("mytest: %q is not a mysql://user:password@host:port/db URL", dsn)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	cfg.MultiStatements = true
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mytest: %w", err)
	}
	return sql.OpenDB(c), nil
}

// KineDSN is a mysql://user:password@host:port/db URL in kine's own
// form, mysql://user:password@tcp(host:port)/db, which kine reads.
func KineDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	return "mysql://" + u.User.String() + "@tcp(" + u.Host + ")" + u.Path
}

// URLOfKineDSN is KineDSN's inverse.
func URLOfKineDSN(dsn string) string {
	rest, ok := strings.CutPrefix(dsn, "mysql://")
	user, addr, found := strings.Cut(rest, "@tcp(")
	if !ok || !found {
		return dsn
	}
	host, path, _ := strings.Cut(addr, ")")
	return "mysql://" + user + "@" + host + path
}

// admin connects to the server of a mysql://user:pass@host:port/ URL.
func admin(adminDSN string) (*sql.DB, *url.URL, error) {
	u, err := url.Parse(adminDSN)
	if err != nil || u.Scheme != "mysql" {
		return nil, nil, fmt.Errorf("mytest: %s must be a mysql://user:password@host:port/ URL", EnvDSN)
	}
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr = "tcp", u.Host
	c, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("mytest: %w", err)
	}
	return sql.OpenDB(c), u, nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
		if b.Len() >= 24 {
			break
		}
	}
	return b.String()
}
