// Command mycluster starts and stops a throwaway MariaDB for scripts
// (scripts/conformance.sh), as pgcluster does PostgreSQL:
//
//	mycluster start        prints "DSN DIR" of a new running server
//	mycluster stop DIR     kills it and removes DIR
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/test/mytest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch {
	case len(os.Args) == 2 && os.Args[1] == "start":
		in, err := mytest.StartDetached(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mycluster:", err)
			os.Exit(1)
		}
		fmt.Println(in.DSN(""), in.Dir)
	case len(os.Args) == 3 && os.Args[1] == "stop":
		dir := os.Args[2]
		if !strings.HasPrefix(filepath.Base(dir), "quanty-my-") {
			fmt.Fprintln(os.Stderr, "mycluster: refusing to remove", dir)
			os.Exit(2)
		}
		mytest.Attach(dir).Destroy()
	default:
		fmt.Fprintln(os.Stderr, "usage: mycluster start | mycluster stop DIR")
		os.Exit(2)
	}
}
