package util

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
)

// SetupRoot makes root the root of the commands, printing on streams:
// kubectl's global flags on every command (ADR-024) and --etcd-prefix,
// the shell completing -n with the namespaces; errors are Execute's to
// print.
func SetupRoot(root *cobra.Command, f *Factory, streams genericiooptions.IOStreams) {
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	root.SilenceErrors, root.SilenceUsage = true, true
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &flagError{cmd: c, err: err} })
	root.PersistentFlags().AddFlagSet(f.KubectlFlags)
	root.PersistentFlags().StringVar(&f.EtcdPrefix, "etcd-prefix", f.EtcdPrefix, "kube-apiserver's --etcd-prefix, under which it stores objects")
	_ = root.RegisterFlagCompletionFunc("namespace", CompleteNamespace(f))
}

// flagError is a command line that does not parse.
type flagError struct {
	cmd *cobra.Command
	err error
}

func (e *flagError) Error() string { return e.err.Error() }

// Execute runs one command line and returns its exit status: 0, the
// command's failure status (1; diff's 2, ErrorStatusAnnotation) with the
// error printed, or an ExitError's.
func Execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	errOut := root.ErrOrStderr()
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Err != nil {
			fmt.Fprintf(errOut, "error: %v\n", ee.Err)
		}
		return ee.Code
	}
	status := 1
	if s, ok := cmd.Annotations[ErrorStatusAnnotation]; ok {
		status, _ = strconv.Atoi(s)
	}
	var fe *flagError
	switch {
	case errors.As(err, &fe):
		fmt.Fprintf(errOut, "error: %v\nSee '%s --help' for usage.\n", fe.err, fe.cmd.CommandPath())
	case strings.HasPrefix(err.Error(), "unknown command "):
		fmt.Fprintf(errOut, "error: %v\nRun '%s --help' for usage.\n", err, root.CommandPath())
	default:
		fmt.Fprintf(errOut, "error: %v\n", err)
	}
	return status
}
