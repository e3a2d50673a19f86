package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Flags as operators write them, and what each becomes in the server's
// configuration; the old --cache-bytes keeps its meaning.
func TestServeFlags(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		disabled  bool
		indexSize int64
		check     func(t *testing.T, f *serveFlags)
	}{
		{name: "defaults", indexSize: mvcc.DefaultLiveIndexBytes, check: func(t *testing.T, f *serveFlags) {
			if f.cfg.Listener != DefaultListenAddress || f.cfg.Retain != DefaultRetain || len(f.cfg.RetainPrefixes) != 2 {
				t.Errorf("defaults: listener %q retain %v prefixes %v", f.cfg.Listener, f.cfg.Retain, f.cfg.RetainPrefixes)
			}
		}},
		{name: "live index size", args: []string{"--live-index-bytes", "1048576"}, indexSize: 1 << 20},
		{name: "live index off", args: []string{"--live-index=false"}, disabled: true, indexSize: mvcc.DefaultLiveIndexBytes},
		{name: "old name, a size", args: []string{"--cache-bytes", "4096"}, indexSize: 4096},
		{name: "old name, 0 is off", args: []string{"--cache-bytes", "0"}, disabled: true, indexSize: mvcc.DefaultLiveIndexBytes},
		{name: "retain prefixes replace the defaults", args: []string{"--retain-prefix", "/a/=2m", "--retain-prefix", "/b/=0s"}, indexSize: mvcc.DefaultLiveIndexBytes,
			check: func(t *testing.T, f *serveFlags) {
				got := f.cfg.RetainPrefixes
				if len(got) != 2 || string(got[0].Prefix) != "/a/" || got[0].Retain != 2*time.Minute || string(got[1].Prefix) != "/b/" || got[1].Retain != 0 {
					t.Errorf("prefixes %+v", got)
				}
			}},
		{name: "quota as a size", args: []string{"--quota-backend-bytes", "2Gi"}, indexSize: mvcc.DefaultLiveIndexBytes,
			check: func(t *testing.T, f *serveFlags) {
				if f.cfg.QuotaBackendBytes != 2<<30 {
					t.Errorf("quota %d, want %d", f.cfg.QuotaBackendBytes, 2<<30)
				}
			}},
		{name: "quota in bytes, as etcd's", args: []string{"--quota-backend-bytes", "8589934592"}, indexSize: mvcc.DefaultLiveIndexBytes,
			check: func(t *testing.T, f *serveFlags) {
				if f.cfg.QuotaBackendBytes != 8<<30 {
					t.Errorf("quota %d, want %d", f.cfg.QuotaBackendBytes, 8<<30)
				}
			}},
		{name: "a negative quota is none, as etcd's", args: []string{"--quota-backend-bytes", "-1"}, indexSize: mvcc.DefaultLiveIndexBytes,
			check: func(t *testing.T, f *serveFlags) {
				if f.cfg.QuotaBackendBytes != 0 {
					t.Errorf("quota %d, want 0", f.cfg.QuotaBackendBytes)
				}
			}},
		{name: "pool and TLS", args: []string{"--datastore-max-open-connections", "3", "--cert-file", "c", "--key-file", "k", "--trusted-ca-file", "ca", "--client-cert-auth", "--datastore-cafile", "dbca"}, indexSize: mvcc.DefaultLiveIndexBytes,
			check: func(t *testing.T, f *serveFlags) {
				c := f.cfg
				if c.ConnectionPoolConfig.MaxOpen != 3 || c.ServerTLSConfig.CertFile != "c" || c.ServerTLSConfig.KeyFile != "k" || c.ServerTLSConfig.TrustedCAFile != "ca" || c.BackendTLSConfig.CAFile != "dbca" {
					t.Errorf("config %+v", c)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newServeFlags(io.Discard)
			if err := f.parse(c.args); err != nil {
				t.Fatal(err)
			}
			if f.cfg.DisableLiveIndex != c.disabled || f.cfg.LiveIndexBytes != c.indexSize {
				t.Errorf("live index disabled %v size %d, want %v %d", f.cfg.DisableLiveIndex, f.cfg.LiveIndexBytes, c.disabled, c.indexSize)
			}
			if c.check != nil {
				c.check(t, f)
			}
		})
	}
}

// Every flag combination that cannot mean anything is refused with a
// message naming the flag.
func TestServeFlagErrors(t *testing.T) {
	cases := map[string][]string{
		"--client-cert-auth needs --trusted-ca-file": {"--client-cert-auth"},
		"old name of --live-index-bytes":             {"--cache-bytes", "10", "--live-index-bytes", "20"},
		"--cache-bytes -1":                           {"--cache-bytes", "-1"},
		"--live-index-bytes -5":                      {"--live-index-bytes", "-5"},
		`--retain-prefix "/a/"`:                      {"--retain-prefix", "/a/"},
		`--retain-prefix "=1m"`:                      {"--retain-prefix", "=1m"},
		"takes no arguments":                         {"extra"},
		`--quota-backend-bytes: size "lots"`:         {"--quota-backend-bytes", "lots"},
		`--log-format "xml": want text or json`:      {"--log-format", "xml"},
		`--log-level "loud"`:                         {"--log-level", "loud"},
		"--debug is the old form of --log-level":     {"--debug", "--log-level", "warn"},
	}
	for want, args := range cases {
		err := newServeFlags(io.Discard).parse(args)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("serve %v: error %v, want one containing %q", args, err, want)
		}
	}
}

// --log-format json writes one JSON object per line, at --log-level and
// above; text writes key=value.
func TestLogFlags(t *testing.T) {
	for _, c := range []struct {
		format, level string
		check         func(line string) bool
	}{
		{"json", "warn", func(line string) bool { return json.Valid([]byte(line)) && strings.Contains(line, `"msg":"shown"`) }},
		{"text", "warn", func(line string) bool { return strings.Contains(line, "level=WARN msg=shown") }},
	} {
		var buf bytes.Buffer
		log, err := (&logFlags{format: c.format, level: c.level}).logger(&buf)
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hidden")
		log.Warn("shown")
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) != 1 || !c.check(lines[0]) {
			t.Errorf("--log-format %s --log-level %s wrote %q", c.format, c.level, buf.String())
		}
	}
}
