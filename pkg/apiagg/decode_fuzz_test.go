package apiagg

import (
	"encoding/base64"
	"net/http/httptest"
	"net/url"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quantyroot/quantykube/proto/historypb"
)

// FuzzQuery feeds any q parameter through the read path's decoding: it
// never panics, and whatever it accepts is a Request with a key that
// encodes back to what was decoded.
func FuzzQuery(f *testing.F) {
	for _, r := range []*historypb.Request{
		{Key: []byte("/registry/configmaps/ns/c")},
		{Key: []byte("/registry/secrets/"), RangeEnd: []byte("/registry/secrets0"), Limit: 10, Continue: "5.0"},
		{Key: []byte{0, 0xff}, Revision: 7, UnixMs: 1},
	} {
		b, _ := proto.Marshal(r)
		f.Add(base64.RawURLEncoding.EncodeToString(b))
		f.Add(base64.URLEncoding.EncodeToString(b))
	}
	f.Add("")
	f.Add("%%%")
	f.Add("AAAA====")
	s := &Server{cfg: Config{MaxRequestBytes: DefaultMaxRequestBytes}}
	f.Fuzz(func(t *testing.T, q string) {
		r := httptest.NewRequest("GET", "/x?q="+url.QueryEscape(q), nil)
		req, err := s.query(r)
		if err != nil {
			if req != nil {
				t.Fatal("a request with an error")
			}
			return
		}
		if len(req.Key) == 0 {
			t.Fatalf("accepted a request without a key from %q", q)
		}
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeRequest(b)
		if err != nil || !proto.Equal(again, req) {
			t.Fatalf("re-decoding %v: %v %v", req, again, err)
		}
	})
}
