package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// EnvPgBouncer overrides where the pgbouncer binary is looked for.
const EnvPgBouncer = "QUANTY_TEST_PGBOUNCER"

// DefaultPgBouncer is where Debian's package puts it.
const DefaultPgBouncer = "/usr/sbin/pgbouncer"

// ErrNoPgBouncer means the pgbouncer binary is missing.
var ErrNoPgBouncer = errors.New("no pgbouncer at " + DefaultPgBouncer + " (apt-get install pgbouncer) or " + EnvPgBouncer)

// PgBouncer is a throwaway PgBouncer in front of one PostgreSQL server,
// listening on 127.0.0.1 only, a child of this process.
type PgBouncer struct {
	Dir  string
	Port int
	cmd  *exec.Cmd
	done chan struct{}
}

// StartPgBouncer starts pgbouncer in pool mode mode ("transaction" or
// "session") in front of the server at host:port, every database of it
// reached by its own name. Apart from the addresses, trust
// authentication and room for the tests' clients (max_client_conn), the
// settings are PgBouncer's defaults: startup parameters other than the
// ones it tracks refused, no prepared statements across transactions
// (1.18 has none; later versions only with max_prepared_statements).
func StartPgBouncer(ctx context.Context, host string, port int, mode string) (*PgBouncer, error) {
	return StartPgBouncerPool(ctx, host, port, mode, 0)
}

// StartPgBouncerPool is StartPgBouncer with at most poolSize server
// connections per database (default_pool_size; 0: PgBouncer's 20), as a
// pooler shared by many clusters is sized.
func StartPgBouncerPool(ctx context.Context, host string, port int, mode string, poolSize int) (*PgBouncer, error) {
	bin := os.Getenv(EnvPgBouncer)
	if bin == "" {
		bin = DefaultPgBouncer
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, ErrNoPgBouncer
	}
	dir, err := os.MkdirTemp("", "quanty-pgbouncer-")
	if err != nil {
		return nil, err
	}
	uid, gid := -1, -1
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: running as root and there is no postgres user: %w", err)
		}
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	b := &PgBouncer{Dir: dir}
	var lastErr error
	for range 5 {
		if b.Port, err = freePort(); err != nil {
			return nil, err
		}
		if lastErr = b.start(ctx, bin, host, port, mode, poolSize, uid, gid); lastErr == nil {
			return b, nil
		}
	}
	os.RemoveAll(dir)
	return nil, lastErr
}

func (b *PgBouncer) start(ctx context.Context, bin, host string, port int, mode string, poolSize, uid, gid int) error {
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
max_client_conn = 2000
logfile = %s
`, host, port, b.Port, filepath.Join(b.Dir, "userlist.txt"), mode, filepath.Join(b.Dir, "pgbouncer.log"))
	if poolSize > 0 {
		ini += fmt.Sprintf("default_pool_size = %d\n", poolSize)
	}
	for name, body := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": `"postgres" ""` + "\n"} {
		if err := os.WriteFile(filepath.Join(b.Dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	cmd := exec.Command(bin, filepath.Join(b.Dir, "pgbouncer.ini"))
	cmd.Dir = b.Dir
	// Pdeathsig: a test binary killed by its timeout leaves no pooler.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if uid >= 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	out := &tailWriter{}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig fires when the thread that started the child ends, and Go
	// ends threads (one whose goroutine exited locked to it, as some
	// suites' goroutines do): start it from a thread locked to a
	// goroutine that waits for it, so that thread lives as long as it.
	started := make(chan error)
	b.done = make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(b.done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgtest: start pgbouncer: %w", err)
	}
	b.cmd = cmd
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-b.done:
			log, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
			return fmt.Errorf("pgtest: pgbouncer exited at start:\n%s%s", out.String(), tail(string(log), 2000))
		case <-ctx.Done():
			b.Stop()
			return ctx.Err()
		default:
		}
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port)), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			b.Stop()
			return fmt.Errorf("pgtest: pgbouncer does not accept connections after 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends pgbouncer (SIGINT: it closes every connection at once).
func (b *PgBouncer) Stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd = nil
}

// Destroy stops pgbouncer and removes its directory.
func (b *PgBouncer) Destroy() {
	b.Stop()
	os.RemoveAll(b.Dir)
}

// Log is pgbouncer's log file so far.
func (b *PgBouncer) Log() string {
	log, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
	return string(log)
}

// Through rewrites dsn, a URL of the server behind b, to reach the same
// database through b.
func (b *PgBouncer) Through(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	return u.String(), nil
}

// tailWriter keeps what a process printed, for its error message.
type tailWriter struct{ b []byte }

func (w *tailWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	if len(w.b) > 4096 {
		w.b = w.b[len(w.b)-4096:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string { return string(w.b) }
