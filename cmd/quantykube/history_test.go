package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quantyroot/quantykube/proto/historypb"
)

func TestSummarizeValue(t *testing.T) {
	long := strings.Repeat("abcdefghij", 10)
	cases := []struct {
		in   []byte
		want string
	}{
		{nil, `""`},
		{[]byte("hello"), "hello"},
		{[]byte("héllo wörld"), "héllo wörld"},
		{[]byte("{\"a\":1}\n"), `{"a":1} `},
		{[]byte("a\tb"), "a b"},
		{[]byte(long[:40]), long[:40]},
		{[]byte(long), long[:40] + "… (100 bytes)"},
		{[]byte("k8s\x00\n\x0fv1"), "k8s… (8 bytes)"},
		{[]byte{0, 1, 2, 0xff}, "(4 bytes)"},
		{[]byte("\xffabc"), "(4 bytes)"},
		{[]byte(" \x01"), "(2 bytes)"},
	}
	for _, c := range cases {
		if got := summarizeValue(c.in); got != c.want {
			t.Errorf("summarizeValue(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDisplayKey(t *testing.T) {
	for in, want := range map[string]string{
		"/registry/pods/default/x": "/registry/pods/default/x",
		"":                         `""`,
		"a b":                      `"a b"`,
		"a\x00b":                   `"a\x00b"`,
		"\xff":                     `"\xff"`,
		"ключ":                     "ключ",
	} {
		if got := displayKey([]byte(in)); got != want {
			t.Errorf("displayKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{
		"/a/":      "/a0",
		"a":        "b",
		"a\xff":    "b",
		"\xff\xff": "\x00",
		"":         "\x00",
	} {
		if got := string(prefixEnd([]byte(in))); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	cases := []struct {
		in, dial, server string
		tls, wantTLS     bool
	}{
		{"127.0.0.1:2379", "passthrough:///127.0.0.1:2379", "127.0.0.1", false, false},
		{"localhost:2379", "passthrough:///localhost:2379", "localhost", true, true},
		{"[::1]:2379", "passthrough:///[::1]:2379", "::1", false, false},
		{"http://127.0.0.1:2379", "passthrough:///127.0.0.1:2379", "127.0.0.1", false, false},
		{"https://etcd.example:2379", "passthrough:///etcd.example:2379", "etcd.example", true, false},
		{"https://etcd.example:2379/", "passthrough:///etcd.example:2379", "etcd.example", true, false},
		{"unix:///run/qk.sock", "unix:///run/qk.sock", "localhost", false, false},
		{"unix://rel.sock", "unix:rel.sock", "localhost", false, false},
		{"unix:rel.sock", "unix:rel.sock", "localhost", false, false},
		{"unix:///run/qk.sock", "unix:///run/qk.sock", "localhost", true, true},
	}
	for _, c := range cases {
		got, err := parseEndpoint(c.in, c.wantTLS)
		if err != nil {
			t.Errorf("parseEndpoint(%q): %v", c.in, err)
			continue
		}
		if got.dial != c.dial || got.server != c.server || got.tls != c.tls || got.endpoint != c.in {
			t.Errorf("parseEndpoint(%q) = %+v, want dial %q server %q tls %v", c.in, got, c.dial, c.server, c.tls)
		}
	}
	for _, in := range []string{"", "ftp://x:1", "http://", "http://x:1/path", "unix://", "a/b:1"} {
		if _, err := parseEndpoint(in, false); err == nil {
			t.Errorf("parseEndpoint(%q): want an error", in)
		}
	}
	if _, err := parseEndpoint("http://x:1", true); err == nil || !strings.Contains(err.Error(), "https://") {
		t.Errorf("http:// with TLS flags: error %v, want a hint at https://", err)
	}
}

func testEntries() []*historypb.LogEntry {
	ms := int64(1741600000123)
	return []*historypb.LogEntry{
		{Revision: 2, UnixMs: ms, Kv: &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("one"), CreateRevision: 2, ModRevision: 2, Version: 1}},
		{Revision: 3, UnixMs: ms + 1500, Kv: &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("two"), CreateRevision: 2, ModRevision: 3, Version: 2},
			PrevKv: &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("one"), CreateRevision: 2, ModRevision: 2, Version: 1}},
		{Revision: 14, UnixMs: ms + 60000, Deleted: 1, Kv: &mvccpb.KeyValue{Key: []byte("/a"), ModRevision: 14},
			PrevKv: &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("two"), CreateRevision: 2, ModRevision: 3, Version: 2}},
		{Revision: 1003, UnixMs: ms + 3600000, Kv: &mvccpb.KeyValue{Key: []byte("/long/key/name"), Value: []byte("k8s\x00binary"), CreateRevision: 1003, ModRevision: 1003, Version: 1}},
		// The oldest retained change of a key whose create was pruned: no
		// prev_kv, but not a create.
		{Revision: 1004, UnixMs: ms + 3600001, Kv: &mvccpb.KeyValue{Key: []byte("/b"), Value: []byte("x"), CreateRevision: 5, ModRevision: 1004, Version: 7}},
	}
}

func TestWriteLogTable(t *testing.T) {
	var buf bytes.Buffer
	if err := writeLogTable(&buf, testEntries(), time.UTC); err != nil {
		t.Fatal(err)
	}
	want := `REVISION  TIME                      TYPE    KEY             VALUE
2         2025-03-10T09:46:40.123Z  CREATE  /a              one
3         2025-03-10T09:46:41.623Z  PUT     /a              two
14        2025-03-10T09:47:40.123Z  DELETE  /a              -
1003      2025-03-10T10:46:40.123Z  CREATE  /long/key/name  k8s… (10 bytes)
1004      2025-03-10T10:46:40.124Z  PUT     /b              x
`
	if buf.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	if err := writeLogTable(&buf, nil, time.UTC); err != nil || buf.String() != "REVISION  TIME  TYPE  KEY  VALUE\n" {
		t.Fatalf("empty table = %q, %v", buf.String(), err)
	}
}

func TestWriteGetAndRestoreTables(t *testing.T) {
	kv := &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("two"), CreateRevision: 2, ModRevision: 3, Version: 2, Lease: 7}
	var buf bytes.Buffer
	must(t, writeGetTable(&buf, []byte("/a"), &historypb.GetResponse{Revision: 9, Kv: kv}))
	must(t, writeGetTable(&buf, []byte("/a"), &historypb.GetResponse{Revision: 20}))
	want := `REVISION  KEY  STATE    CREATE_REV  MOD_REV  VERSION  VALUE
9         /a   PRESENT  2           3        2        two
REVISION  KEY  STATE   CREATE_REV  MOD_REV  VERSION  VALUE
20        /a   ABSENT  -           -        -        -
`
	if buf.String() != want {
		t.Fatalf("get tables:\n%s\nwant:\n%s", buf.String(), want)
	}
	buf.Reset()
	written := &mvccpb.KeyValue{Key: []byte("/a"), Value: []byte("two"), CreateRevision: 21, ModRevision: 21, Version: 1}
	must(t, writeRestoreTable(&buf, []byte("/a"), &historypb.RestoreResponse{Revision: 3, Kv: written, NewRevision: 21}))
	must(t, writeRestoreTable(&buf, []byte("/a"), &historypb.RestoreResponse{Revision: 3, Kv: written}))
	must(t, writeRestoreTable(&buf, []byte("/a"), &historypb.RestoreResponse{Revision: 1, NewRevision: 22}))
	must(t, writeRestoreTable(&buf, []byte("/a"), &historypb.RestoreResponse{Revision: 1}))
	want = `FROM_REV  NEW_REV  TYPE  KEY  CREATE_REV  MOD_REV  VERSION  VALUE
3         21       PUT   /a   21          21       1        two
FROM_REV  NEW_REV  TYPE       KEY  CREATE_REV  MOD_REV  VERSION  VALUE
3         -        UNCHANGED  /a   21          21       1        two
FROM_REV  NEW_REV  TYPE    KEY  CREATE_REV  MOD_REV  VERSION  VALUE
1         22       DELETE  /a   -           -        -        (absent)
FROM_REV  NEW_REV  TYPE       KEY  CREATE_REV  MOD_REV  VERSION  VALUE
1         -        UNCHANGED  /a   -           -        -        (absent)
`
	if buf.String() != want {
		t.Fatalf("restore tables:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	must(t, writeJSON(&buf, &historypb.LogResponse{Entries: testEntries()[:3], HeaderRevision: 14}))
	var doc struct {
		Entries []struct {
			Revision string `json:"revision"`
			UnixMs   string `json:"unix_ms"`
			Deleted  string `json:"deleted"`
			Kv       *struct {
				Key   []byte `json:"key"`
				Value []byte `json:"value"`
			} `json:"kv"`
			PrevKv *struct {
				Value []byte `json:"value"`
			} `json:"prev_kv"`
		} `json:"entries"`
		Continue       *string `json:"continue"`
		HeaderRevision string  `json:"header_revision"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("not one JSON document: %v\n%s", err, buf.String())
	}
	if len(doc.Entries) != 3 || doc.HeaderRevision != "14" || doc.Continue == nil || *doc.Continue != "" {
		t.Fatalf("json = %s", buf.String())
	}
	e := doc.Entries
	if e[0].Revision != "2" || e[0].UnixMs != "1741600000123" || e[0].Deleted != "0" || string(e[0].Kv.Value) != "one" || e[0].PrevKv != nil {
		t.Fatalf("entry 0 = %+v", e[0])
	}
	if e[2].Deleted != "1" || string(e[2].Kv.Key) != "/a" || string(e[2].PrevKv.Value) != "two" {
		t.Fatalf("entry 2 = %+v", e[2])
	}
	buf.Reset()
	must(t, writeJSON(&buf, &historypb.GetResponse{Revision: 5}))
	var get map[string]any
	if err := json.Unmarshal(buf.Bytes(), &get); err != nil {
		t.Fatal(err)
	}
	if kv, ok := get["kv"]; !ok || kv != nil || get["revision"] != "5" {
		t.Fatalf("get json = %s", buf.String())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeHistory serves a Log of n changes in pages, for the client's paging.
type fakeHistory struct {
	historypb.UnimplementedHistoryServer
	n     int
	calls []*historypb.Request
}

func (f *fakeHistory) Log(_ context.Context, req *historypb.Request) (*historypb.LogResponse, error) {
	f.calls = append(f.calls, req)
	start := 1
	if req.Continue != "" {
		var err error
		if start, err = strconv.Atoi(req.Continue); err != nil {
			return nil, status.Error(codes.InvalidArgument, "bad continue")
		}
	}
	limit := int(req.Limit)
	if limit == 0 {
		limit = 1000
	}
	if limit > 10000 {
		return nil, status.Error(codes.InvalidArgument, "limit too large")
	}
	resp := &historypb.LogResponse{HeaderRevision: int64(f.n) + int64(len(f.calls))}
	for r := start; r <= f.n && len(resp.Entries) < limit; r++ {
		resp.Entries = append(resp.Entries, &historypb.LogEntry{Revision: int64(r), Kv: &mvccpb.KeyValue{Key: req.Key, Version: int64(r)}})
	}
	if next := start + len(resp.Entries); next <= f.n {
		resp.Continue = strconv.Itoa(next)
	}
	return resp, nil
}

func (f *fakeHistory) Get(context.Context, *historypb.Request) (*historypb.GetResponse, error) {
	return nil, status.Error(codes.OutOfRange, "quantykube: revision 3 is older than the oldest retained revision 10 (2025-03-10T09:46:40Z)")
}

func startFake(t *testing.T, f *fakeHistory) *historyConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := grpc.NewServer()
	historypb.RegisterHistoryServer(srv, f)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := connFlags{endpoints: []string{"127.0.0.1:1", lis.Addr().String()}, dialTimeout: 5 * time.Second, commandTimeout: 5 * time.Second}
	hc, err := c.connect(t.Context())
	must(t, err)
	t.Cleanup(func() { hc.Close() })
	if hc.endpoint != lis.Addr().String() {
		t.Fatalf("connected to %s, want the second endpoint %s", hc.endpoint, lis.Addr())
	}
	return hc
}

func TestReadLogPaging(t *testing.T) {
	cases := []struct {
		n, limit    int
		want        int
		pageLimits  []int64
		wantMore    bool
		description string
	}{
		{n: 2500, limit: 0, want: 2500, pageLimits: []int64{0, 0, 0}, description: "all pages at the server's size"},
		{n: 1000, limit: 0, want: 1000, pageLimits: []int64{0}, description: "exactly one page"},
		{n: 0, limit: 0, want: 0, pageLimits: []int64{0}, description: "empty"},
		{n: 2500, limit: 10, want: 10, pageLimits: []int64{10}, wantMore: true, description: "a limit below a page"},
		{n: 25000, limit: 12000, want: 12000, pageLimits: []int64{10000, 2000}, wantMore: true, description: "a limit above the largest page"},
		{n: 5, limit: 10, want: 5, pageLimits: []int64{10}, description: "a limit above the log"},
	}
	for _, c := range cases {
		t.Run(c.description, func(t *testing.T) {
			f := &fakeHistory{n: c.n}
			hc := startFake(t, f)
			all, err := readLog(t.Context(), hc, &historypb.Request{Key: []byte("/k")}, int64(c.limit))
			must(t, err)
			if len(all.Entries) != c.want {
				t.Fatalf("%d entries, want %d", len(all.Entries), c.want)
			}
			for i, e := range all.Entries {
				if e.Revision != int64(i+1) {
					t.Fatalf("entry %d has revision %d: gap or duplicate", i, e.Revision)
				}
			}
			var limits []int64
			for _, r := range f.calls {
				limits = append(limits, r.Limit)
			}
			if fmt.Sprint(limits) != fmt.Sprint(c.pageLimits) {
				t.Fatalf("page limits %v, want %v", limits, c.pageLimits)
			}
			if (all.Continue != "") != c.wantMore {
				t.Fatalf("continue = %q, want more: %v", all.Continue, c.wantMore)
			}
			if all.HeaderRevision != int64(c.n)+1 {
				t.Fatalf("header revision %d, want the first page's %d", all.HeaderRevision, c.n+1)
			}
		})
	}
}

func TestErrorsPassThrough(t *testing.T) {
	hc := startFake(t, &fakeHistory{})
	_, err := call(t.Context(), hc, hc.client.Get, &historypb.Request{Key: []byte("/a"), Revision: 3})
	if err == nil || err.Error() != "revision 3 is older than the oldest retained revision 10 (2025-03-10T09:46:40Z)" {
		t.Fatalf("OutOfRange: %v", err)
	}
	_, err = call(t.Context(), hc, hc.client.Restore, &historypb.Request{Key: []byte("/a"), Revision: 3})
	if err == nil || !strings.Contains(err.Error(), "does not serve quantykube.History") {
		t.Fatalf("Unimplemented: %v", err)
	}
}

func TestConnectRefusedNamesEndpoint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := lis.Addr().String()
	lis.Close()
	c := connFlags{endpoints: []string{"http://" + addr}, dialTimeout: 5 * time.Second, commandTimeout: time.Second}
	_, err = c.connect(t.Context())
	want := "cannot connect to http://" + addr + ": connection refused"
	if err == nil || err.Error() != want {
		t.Fatalf("error %v, want %q", err, want)
	}
}
