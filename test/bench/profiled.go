package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	httppprof "net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"sync"
	"syscall"
	"time"

	"github.com/quantyroot/quantykube/pkg/endpoint"
)

// serveProfiled is `bench serve-profiled`: QuantyKube through the same
// pkg/endpoint.Start that cmd/quantykube calls, in its own process, plus a
// loopback control endpoint that starts and stops a CPU profile per phase.
// The control endpoint also serves net/http/pprof, for an execution trace of
// a phase (the Postgres writer mostly waits on the network, which a CPU
// profile does not show).
//
//	POST /start?name=create-c64   begins <profile-dir>/<name>.pprof
//	POST /stop                    ends it
//	GET  /debug/pprof/trace?seconds=3
func serveProfiled(args []string) error {
	fs := flag.NewFlagSet("serve-profiled", flag.ContinueOnError)
	listen := fs.String("listen-address", "127.0.0.1:0", "etcd API address")
	dsn := fs.String("endpoint", "", "database DSN")
	control := fs.String("control-address", "127.0.0.1:0", "loopback address of the profile control endpoint")
	dir := fs.String("profile-dir", ".", "where CPU profiles are written")
	withTrace := fs.Bool("trace", false, "also write an execution trace per phase (<name>.trace): where goroutines wait, which a CPU profile does not show")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := endpoint.Start(ctx, endpoint.Config{Listener: *listen, Endpoint: *dsn, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer srv.Close()

	host, _, err := net.SplitHostPort(*control)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		return fmt.Errorf("control address %q must be on loopback", *control)
	}
	var mu sync.Mutex
	var cur, curTrace *os.File
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		name := filepath.Base(r.URL.Query().Get("name"))
		if cur != nil || name == "" || name == "." {
			http.Error(w, "profile already running or no name", http.StatusConflict)
			return
		}
		f, err := os.Create(filepath.Join(*dir, name+".pprof"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		cur = f
		if *withTrace {
			tf, err := os.Create(filepath.Join(*dir, name+".trace"))
			if err == nil && trace.Start(tf) != nil {
				tf.Close()
				tf = nil
			}
			curTrace = tf
		}
	})
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if cur == nil {
			return
		}
		pprof.StopCPUProfile()
		cur.Close()
		cur = nil
		if curTrace != nil {
			trace.Stop()
			curTrace.Close()
			curTrace = nil
		}
	})
	mux.HandleFunc("/debug/pprof/trace", httppprof.Trace)
	mux.HandleFunc("/debug/pprof/", httppprof.Index)
	l, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(l)
	defer hs.Close()
	<-ctx.Done()
	mu.Lock()
	if cur != nil {
		pprof.StopCPUProfile()
		cur.Close()
	}
	if curTrace != nil {
		trace.Stop()
		curTrace.Close()
	}
	mu.Unlock()
	return nil
}

// profileControl posts to a profiled server's control endpoint.
func profileControl(addr, path string) error {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Post("http://"+addr+path, "text/plain", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return errors.New(string(b))
	}
	return nil
}
