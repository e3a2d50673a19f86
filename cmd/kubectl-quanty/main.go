// Command kubectl-quanty is the kubectl plugin for QuantyKube's history:
// `kubectl quanty log|get|diff|restore|deleted|undelete|changes|blame|revert`.
// It reaches the aggregated API quanty.quantyroot.io/v1alpha1 (pkg/apiagg)
// only through kubectl, so it needs nothing but what kubectl already uses.
// Its commands are in internal/cmd, built as kubectl builds its own; it is
// a module of its own, so that a program embedding QuantyKube's
// pkg/endpoint inherits none of its dependencies (ADR-040).
package main

import (
	"context"
	"os"
	"os/signal"

	"golang.org/x/term"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
)

// version is set by make dist (-ldflags -X main.version=...).
var version = "dev"

func main() {
	f := util.NewFactory()
	f.Color = term.IsTerminal(int(os.Stdout.Fd())) && os.Getenv("NO_COLOR") == ""
	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := util.Execute(ctx, cmd.NewCmdQuanty(f, streams, version), os.Args[1:])
	stop()
	os.Exit(code)
}
