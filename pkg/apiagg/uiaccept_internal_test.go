package apiagg

import (
	"net/http/httptest"
	"testing"
)

// JSON answers go to the page, which asks for JSON alone; kubectl get
// --raw (kubectl-quanty) asks for "application/json, */*" and reads
// protobuf.
func TestWantsJSONOnlyWhenAskedForJSONAlone(t *testing.T) {
	for accept, want := range map[string]bool{
		"application/json":                    true,
		"application/json; charset=utf-8":     true,
		"application/json, */*":               false,
		"":                                    false,
		"*/*":                                 false,
		"application/vnd.kubernetes.protobuf": false,
		"application/json, text/html":         false,
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Accept", accept)
		if got := wantsJSON(r); got != want {
			t.Errorf("Accept %q: JSON %t, want %t", accept, got, want)
		}
	}
}
