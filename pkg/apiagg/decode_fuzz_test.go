package apiagg

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"

	"google.golang.org/protobuf/proto"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
		wantRoundTrip(t, req)
	})
}

// FuzzBody feeds any body through a write's (POST restores) decoding: it
// never panics, refuses with a Status of 400 or 413, and accepts only a
// Request with a key, whole (wantRoundTrip).
func FuzzBody(f *testing.F) {
	for _, r := range []*historypb.Request{
		{Key: []byte("/registry/configmaps/ns/c"), Revision: 12},
		{Key: []byte("/registry/secrets/ns/s"), UnixMs: 1700000000000},
		{Key: []byte{0, 0xff}, RangeEnd: []byte{0}},
		{Revision: 3},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	s := &Server{cfg: Config{MaxRequestBytes: DefaultMaxRequestBytes}}
	f.Fuzz(func(t *testing.T, body []byte) {
		w := httptest.NewRecorder()
		req, err := s.body(w, httptest.NewRequest("POST", "/x", bytes.NewReader(body)))
		if err != nil {
			if req != nil {
				t.Fatal("a request with an error")
			}
			var se *apierrors.StatusError
			if !errors.As(err, &se) || (se.ErrStatus.Code != 400 && se.ErrStatus.Code != 413) {
				t.Fatalf("refused with %v, want a Status of 400 or 413", err)
			}
			if len(body) > DefaultMaxRequestBytes && se.ErrStatus.Code != 413 {
				t.Fatalf("a body of %d bytes refused with %v", len(body), err)
			}
			return
		}
		if len(req.Key) == 0 || len(body) > DefaultMaxRequestBytes {
			t.Fatalf("accepted %v from %d bytes", req, len(body))
		}
		wantRoundTrip(t, req)
	})
}

// wantRoundTrip checks that a request decoding accepted encodes to a
// message that decodes to the same request.
func wantRoundTrip(t *testing.T, req *historypb.Request) {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := decodeRequest(b)
	if err != nil || !proto.Equal(again, req) {
		t.Fatalf("re-decoding %v: %v %v", req, again, err)
	}
}
