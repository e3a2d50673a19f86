package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/test/framework"
)

// status --endpoint reads a served store's database: its revision and
// floors, the live keys and the log's rows as the writes made them, the
// same hash as check hash, and on MySQL the server that announces
// itself there.
func TestStatusFromEndpoint(t *testing.T) {
	framework.Run(t, framework.QuantyKube, func(t *testing.T, b framework.Backend) {
		ctx := t.Context()
		x := framework.Start(t, b, framework.Options{})
		cli := x.Client(t)
		for i := range 10 {
			if _, err := cli.Put(ctx, fmt.Sprintf("/s/%d", i%4), strings.Repeat("v", 100)); err != nil { // 2..11
				t.Fatal(err)
			}
		}
		if _, err := cli.Delete(ctx, "/s/0"); err != nil { // 12
			t.Fatal(err)
		}
		if _, err := cli.Compact(ctx, 5); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := (StatusCommand{}).Run(ctx, []string{"--endpoint", x.DSN(), "-o", "json"}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		var st mvcc.StoreStatus
		if err := json.Unmarshal(out.Bytes(), &st); err != nil {
			t.Fatalf("status -o json: %s: %v", out.String(), err)
		}
		// Retention keeps everything here: 11 rows, 3 live keys of
		// 4 + 100 bytes.
		if st.Rev != 12 || st.Compact != 5 || st.Floor != 5 || st.LiveKeys != 3 || st.LiveBytes != 312 || st.LogRows != 11 || st.Schema != 3 || st.DBBytes <= 0 {
			t.Errorf("status: %+v", st)
		}
		rep, err := checkHash(t, "--endpoint", x.DSN())
		if err != nil || rep.Hash != st.Hash {
			t.Errorf("status hash %s, check hash %+v, %v", st.Hash, rep, err)
		}
		// MySQL's servers renew their rows; PostgreSQL's write one at
		// start and renew it only while no LISTEN session proves them.
		if (b == framework.SQLite && len(st.Servers) != 0) || (b == framework.MySQL && len(st.Servers) != 1) {
			t.Errorf("%s: servers announced %v", b, st.Servers)
		}
		out.Reset()
		if err := (StatusCommand{}).Run(ctx, []string{"--endpoint", x.DSN()}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"revision         12 ", "floor            5 (compact 5, retention 0)", "live keys        3, ", "history          11 log rows", "hash             " + st.Hash} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("status --endpoint lacks %q:\n%s", want, out.String())
			}
		}
	})
}

// status takes the database or a server's metrics, not both.
func TestStatusRefusals(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "sqlite:///x.db", "--metrics-address", "127.0.0.1:1"}, "--endpoint reads the database, --metrics-address a server's metrics: give one of them"},
		{[]string{"--endpoint", "sqlite:///x.db", "--objects", "5"}, "--objects a server's metrics"},
		{[]string{"-o", "json"}, "-o is --endpoint's"},
		{[]string{"--endpoint", "sqlite:///x.db", "-o", "yaml"}, `-o "yaml": want text or json`},
		{[]string{"--endpoint", "sqlite://" + t.TempDir() + "/none.db"}, "no QuantyKube store"},
	} {
		err := StatusCommand{}.Run(t.Context(), c.args, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("status %q: %v, want %q", c.args, err, c.want)
		}
	}
}
