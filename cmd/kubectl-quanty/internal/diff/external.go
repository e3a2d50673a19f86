package diff

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Side is one version of an object for an external diff.
type Side struct {
	Label string // the external diff's folder
	Text  string // the YAML; "" for absent
}

// externalArg is what kubectl diff lets through of KUBECTL_EXTERNAL_DIFF's
// arguments.
var externalArg = regexp.MustCompile(`^[a-zA-Z0-9-=]+$`)

// External runs KUBECTL_EXTERNAL_DIFF as kubectl diff does: the
// command and its flags (only letters, digits, - and = pass), then two
// folders, each holding the object's file under the same name. differs
// is its exit status 1.
func External(command, file string, a, b Side, stdout, stderr io.Writer) (differs bool, err error) {
	fields := strings.Split(command, " ")
	var args []string
	for _, f := range fields[1:] {
		if externalArg.MatchString(f) {
			args = append(args, f)
		}
	}
	tmp, err := os.MkdirTemp("", "kubectl-quanty-diff-")
	if err != nil {
		return false, fmt.Errorf("diff: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, s := range []Side{a, b} {
		dir := filepath.Join(tmp, s.Label)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return false, fmt.Errorf("diff: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(s.Text), 0o600); err != nil {
			return false, fmt.Errorf("diff: %w", err)
		}
		args = append(args, dir)
	}
	cmd := exec.Command(fields[0], args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() == 1 {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("KUBECTL_EXTERNAL_DIFF %q: %w", command, err)
	}
	return false, nil
}
