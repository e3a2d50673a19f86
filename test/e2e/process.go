package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// process is a Kubernetes component the suite runs: kube-apiserver or
// kube-controller-manager. Each start appends to one log file.
type process struct {
	name string
	bin  string
	log  string // path of the log file

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // Wait's result, once exited is closed
	logf   *os.File
}

func newProcess(name, bin, dir string) *process {
	return &process{name: name, bin: bin, log: filepath.Join(dir, name+".log")}
}

// start runs the binary with args. It dies with the test binary
// (Pdeathsig), so a test killed by its timeout leaves nothing behind.
func (p *process) start(args []string) error {
	if p.running() {
		return fmt.Errorf("%s: already running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: log: %w", p.name, err)
	}
	fmt.Fprintf(f, "\n===== %s %s %s\n", time.Now().Format(time.RFC3339), p.bin, strings.Join(args, " "))
	cmd := exec.Command(p.bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: start %s: %w", p.name, p.bin, err)
	}
	p.cmd, p.logf, p.exited, p.err = cmd, f, make(chan struct{}), nil
	go func(done chan struct{}) {
		p.err = cmd.Wait()
		close(done)
	}(p.exited)
	return nil
}

func (p *process) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitedEarly reports whether the process stopped without being asked to,
// with its exit status.
func (p *process) exitedEarly() (bool, error) {
	if p.cmd == nil {
		return false, nil
	}
	select {
	case <-p.exited:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits for the process to exit, then SIGKILL.
// kube-apiserver drains its requests on SIGTERM; half a minute is plenty
// for a test cluster's.
func (p *process) stop() error {
	if p.cmd == nil {
		return nil
	}
	defer func() {
		p.cmd = nil
		p.logf.Close()
	}()
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited before it was stopped: %v", p.name, p.err)
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		var ee *exec.ExitError
		if p.err != nil && !errors.As(p.err, &ee) {
			return p.err
		}
		return nil
	case <-time.After(30 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return fmt.Errorf("%s did not stop within 30s of SIGTERM; killed", p.name)
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit 10s after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// tail is the end of the log: what a failing test shows.
func (p *process) tail(n int64) string {
	f, err := os.Open(p.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(log: %v)", err)
	}
	prefix := ""
	if st.Size() > n {
		if _, err := f.Seek(st.Size()-n, io.SeekStart); err != nil {
			return fmt.Sprintf("(log: %v)", err)
		}
		prefix = "..."
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(log: %v)", err)
	}
	return prefix + string(b)
}
