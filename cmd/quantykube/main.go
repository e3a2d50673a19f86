// Command quantykube serves the etcd v3 API from an SQL revision log.
package main

import (
	"fmt"
	"os"

	"github.com/quantyroot/quantykube/pkg/server"
)

const usage = `quantykube: the etcd v3 API on an SQL revision log

Usage:
  quantykube serve [flags]     serve the etcd v3 gRPC API
  quantykube history COMMAND   read and restore retained history (log, get, restore)
  quantykube version           print the version

Run 'quantykube serve --help' for the flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "history":
		err = history(os.Args[2:])
	case "import":
		err = runImport(os.Args[2:])
	case "version", "--version":
		fmt.Printf("quantykube (etcd API %s)\n", server.Version)
	case "help", "-h", "--help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "quantykube: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "quantykube: %v\n", err)
		os.Exit(1)
	}
}
