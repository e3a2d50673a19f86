package robustness

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"go.etcd.io/etcd/tests/v3/robustness/validate"
)

// envValidate names a run saved by Save for TestValidateSaved.
const envValidate = "QUANTY_ROBUSTNESS_VALIDATE"

// TestValidateSaved runs etcd's validators on the run saved in
// $QUANTY_ROBUSTNESS_VALIDATE: a failed run of make chaos again, or, in
// a process of its own, the histories TestHarnessRejects makes. It
// checks nothing when the variable is not set.
func TestValidateSaved(t *testing.T) {
	dir := os.Getenv(envValidate)
	if dir == "" {
		return
	}
	reports, persisted, cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	validate.ValidateAndReturnVisualize(t, zaptest.NewLogger(t), cfg, reports, persisted, 5*time.Minute)
}

// TestHarnessAccepts: the sample run, whose requests are rebuilt from its
// history, passes etcd's validators.
func TestHarnessAccepts(t *testing.T) {
	r := sampleRun()
	reports := r.reports()
	rebuilt, err := Rebuild(reports, r.revs)
	if err != nil {
		t.Fatal(err)
	}
	validate.ValidateAndReturnVisualize(t, zaptest.NewLogger(t), validate.Config{}, reports, rebuilt.Requests, time.Minute)
	if got := Regressions(reports, 5); len(got) != 0 {
		t.Errorf("Regressions of a linearizable run: %q", got)
	}
}

// TestHarnessRejects: the sample run with one read altered, or one watch
// event dropped, fails etcd's validators as the harness runs them. They
// report through a *testing.T, so each runs in a process of its own
// (TestValidateSaved), whose failure and words are checked.
func TestHarnessRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		change  func(r *run)
		reasons []string
		regress bool // Regressions sees it
	}{
		{
			// The case: a read at the latest revision, sent after
			// the write of revision 4 was answered, answers revision 3.
			name: "a read answers an older revision",
			change: func(r *run) {
				s := &r.ops[1][1]
				s.value, s.mod, s.header = "1", 3, 3
			},
			reasons: []string{"Linearization failed", "Failed linearization"},
			regress: true,
		},
		{
			name:    "a read answers a value never written",
			change:  func(r *run) { r.ops[1][1].value = "7" },
			reasons: []string{"Linearization failed", "Failed linearization"},
		},
		{
			name: "a watch event is dropped",
			change: func(r *run) {
				r.watch = append(r.watch[:3], r.watch[4:]...)
			},
			reasons: []string{"broke Reliable"},
		},
		{
			name: "a progress notification runs ahead of the events",
			change: func(r *run) {
				r.watch[2].Revision = 4
			},
			reasons: []string{"broke Bookmarkable"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sampleRun()
			tc.change(r)
			reports := r.reports()
			rebuilt, err := Rebuild(reports, r.revs)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := Save(dir, reports, rebuilt.Requests, validate.Config{}); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run", "^TestValidateSaved$", "-test.v", "-test.count", "1")
			cmd.Env = append(os.Environ(), envValidate+"="+dir)
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("validating the run in a process of its own: %v, want it to fail\n%s", err, out)
			}
			for _, want := range tc.reasons {
				if !strings.Contains(string(out), want) {
					t.Errorf("the validators' output does not say %q:\n%s", want, out)
				}
			}
			if got := Regressions(reports, 5); (len(got) > 0) != tc.regress {
				t.Errorf("Regressions: %q", got)
			} else if tc.regress {
				t.Logf("Regressions: %s", got[0])
			}
		})
	}
}
