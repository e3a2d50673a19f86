package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// The health endpoints, served on the metrics listener in the shape
// Kubernetes components and etcd use, so that the same probes work:
//
//   - /livez: restarting would help: the process answers, its writer
//     goroutine is not stuck outside the database. It never waits on the
//     database (a database that is slow or gone fails /readyz instead:
//     restarting would not bring it back);
//   - /readyz: requests can be served (the database answers, the writer
//     runs, the schema is the one this binary serves, not shutting down);
//   - /healthz: every check (Kubernetes' older endpoint);
//   - /livez/NAME, /readyz/NAME, /healthz/NAME: one check;
//   - /health: etcd's {"health":"true","reason":""}.
//
// An endpoint answers 200 "ok", or 500 listing which checks failed (their
// errors go to the log, as Kubernetes withholds them from a public
// endpoint; one check's own endpoint says its error). ?verbose lists every
// check; ?exclude=NAME (repeatable) skips one.

// checkTimeout bounds one check: a writer stuck in a commit or a database
// that does not answer fails it rather than hanging the probe.
const checkTimeout = 10 * time.Second

type healthCheck struct {
	name  string
	check func(ctx context.Context) error
	warn  bool // a warning: reported, never failing
}

// HealthWarning is a check /readyz?verbose reports without failing: Check
// answers nil or what to warn about (no secret: the endpoints are public).
type HealthWarning struct {
	Name  string
	Check func(ctx context.Context) error
}

// healthChecks are the server's live and ready checks.
func (s *Server) healthChecks() (live, ready []healthCheck) {
	ping := healthCheck{"ping", func(context.Context) error { return nil }, false}
	alive := healthCheck{"writer", s.store.CheckWriterAlive, false}
	writer := healthCheck{"writer", s.store.CheckWriter, false}
	shutdown := healthCheck{"shutdown", func(context.Context) error {
		select {
		case <-s.done:
			return errors.New("the server is shutting down")
		default:
			return nil
		}
	}, false}
	live = []healthCheck{ping, alive}
	ready = []healthCheck{ping, {"database", s.store.CheckDatabase, false}, writer, {"schema", s.store.CheckSchema, false}, shutdown}
	for _, w := range s.cfg.HealthWarnings {
		ready = append(ready, healthCheck{w.Name, w.Check, true})
	}
	return live, ready
}

// registerHealth adds the health endpoints to mux.
func registerHealth(mux *http.ServeMux, log *slog.Logger, live, ready []healthCheck) {
	for _, ep := range []struct {
		name   string
		checks []healthCheck
	}{{"livez", live}, {"readyz", ready}, {"healthz", ready}} {
		mux.Handle("/"+ep.name, healthHandler(ep.name, log, ep.checks))
		for _, c := range ep.checks {
			mux.Handle("/"+ep.name+"/"+c.name, checkHandler(c))
		}
	}
	mux.Handle("/health", etcdHealthHandler(log, ready))
}

func runCheck(r *http.Request, c healthCheck) error {
	ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
	defer cancel()
	return c.check(ctx)
}

func healthHandler(name string, log *slog.Logger, checks []healthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		excluded := map[string]bool{}
		for _, e := range r.URL.Query()["exclude"] {
			excluded[e] = true
		}
		var report strings.Builder
		var failed []string
		for _, c := range checks {
			if excluded[c.name] {
				delete(excluded, c.name)
				fmt.Fprintf(&report, "[+]%s excluded: ok\n", c.name)
				continue
			}
			err := runCheck(r, c)
			if err != nil && c.warn {
				fmt.Fprintf(&report, "[!]%s warning: %v\n", c.name, err)
				continue
			}
			if err != nil {
				log.Warn("health check failed", "endpoint", name, "check", c.name, "err", err)
				fmt.Fprintf(&report, "[-]%s failed: reason withheld\n", c.name)
				failed = append(failed, c.name)
				continue
			}
			fmt.Fprintf(&report, "[+]%s ok\n", c.name)
		}
		for e := range excluded {
			fmt.Fprintf(&report, "warn: no check named %q to exclude\n", e)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if len(failed) > 0 {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "%s%s check failed\n", report.String(), name)
			return
		}
		if _, verbose := r.URL.Query()["verbose"]; !verbose {
			fmt.Fprint(w, "ok")
			return
		}
		fmt.Fprintf(w, "%s%s check passed\n", report.String(), name)
	})
}

func checkHandler(c healthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		err := runCheck(r, c)
		if err != nil && c.warn {
			fmt.Fprintf(w, "ok (warning: %v)", err)
			return
		}
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "internal server error: %v\n", err)
			return
		}
		fmt.Fprint(w, "ok")
	})
}

// etcdHealthHandler answers as etcd's /health does: 200 with health
// "true", or 503 with health "false" and the first failure as the reason.
func etcdHealthHandler(log *slog.Logger, checks []healthCheck) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp := struct {
			Health string `json:"health"`
			Reason string `json:"reason"`
		}{Health: "true"}
		status := http.StatusOK
		for _, c := range checks {
			if c.warn {
				continue
			}
			if err := runCheck(r, c); err != nil {
				log.Warn("health check failed", "endpoint", "health", "check", c.name, "err", err)
				resp.Health, resp.Reason, status = "false", c.name+" check failed", http.StatusServiceUnavailable
				break
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(resp)
	})
}

// clientHTTPHandler is what the client port answers over HTTP/1 (split.go),
// as etcd's client port does: /version, etcd's /health, and /livez and
// /readyz. Metrics stay on the metrics listener.
func (s *Server) clientHTTPHandler() http.Handler {
	mux := http.NewServeMux()
	live, ready := s.healthChecks()
	registerHealth(mux, s.cfg.Logger, live, ready)
	mux.Handle("/version", versionHandler(s.cfg.EmulatedETCDVersion))
	return mux
}

// versionHandler answers as etcd's /version: the server version, and the
// cluster version as etcd derives it (major.minor.0).
func versionHandler(version string) http.Handler {
	cluster := version
	if major, rest, ok := strings.Cut(version, "."); ok {
		minor, _, _ := strings.Cut(rest, ".")
		cluster = major + "." + minor + ".0"
	}
	body, _ := json.Marshal(struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
	}{version, cluster})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
}
