// Command pgcluster starts and stops a throwaway PostgreSQL cluster for
// scripts (scripts/conformance.sh):
//
//	pgcluster start        prints "DSN DIR" of a new running cluster
//	pgcluster stop DIR     stops it and removes DIR
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/test/pgtest"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := os.Getenv(pgtest.EnvBin)
	if bin == "" {
		bin = pgtest.DefaultBin
	}
	switch {
	case len(os.Args) == 2 && os.Args[1] == "start":
		c, err := pgtest.StartCluster(ctx, bin)
		if err != nil {
			fmt.Fprintln(os.Stderr, "pgcluster:", err)
			os.Exit(1)
		}
		fmt.Println(c.DSN("postgres"), c.Dir)
	case len(os.Args) == 3 && os.Args[1] == "stop":
		dir := os.Args[2]
		if !strings.HasPrefix(filepath.Base(dir), "quanty-pg-") {
			fmt.Fprintln(os.Stderr, "pgcluster: refusing to remove", dir)
			os.Exit(2)
		}
		c := &pgtest.Cluster{Dir: dir}
		c.Attach(bin)
		c.Destroy()
	default:
		fmt.Fprintln(os.Stderr, "usage: pgcluster start | pgcluster stop DIR")
		os.Exit(2)
	}
}
