package apiagg

import (
	"context"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/quantyroot/quantykube/pkg/mvcc"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// allowIn is a reviewer that allows every question in one namespace and
// none at the cluster scope or elsewhere.
type allowIn string

func (ns allowIn) Review(_ context.Context, _ user.Info, a Access) (bool, string, error) {
	return a.Namespace == string(ns), "", nil
}

// FuzzChangesFilter feeds any query string through the changes filter and
// any key through the filter it makes: parsing never panics and refuses
// with 400; a key the filter takes is an object of a resource the filter
// names (and not one it excludes), in its namespace when it names one,
// and in the one namespace the caller may list; no page asks more than
// maxQuestions.
func FuzzChangesFilter(f *testing.F) {
	for _, c := range []struct{ query, key string }{
		{"namespace=a&resource=configmaps", "/registry/configmaps/a/x"},
		{"resource=deployments.apps&exclude=configmaps", "/registry/deployments/a/x"},
		{"exclude=events&exclude=leases.coordination.k8s.io", "/registry/leases/a/x"},
		{"namespace=a", "/registry/example.com/widgets/a/w"},
		{"resource=.apps", "/registry/ranges/serviceips"},
		{"namespace=a%2Fb", "/registry/secrets/b/s"},
		{"", "/registry/namespaces/a"},
	} {
		f.Add(c.query, c.key, int64(5))
	}
	keys := storagekey.New("")
	f.Fuzz(func(t *testing.T, query, key string, rev int64) {
		qs, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		flt, err := parseChangesFilter(qs)
		if err != nil {
			if !apierrors.IsBadRequest(err) {
				t.Fatalf("%q: refused with %v, want 400", query, err)
			}
			return
		}
		s := &Server{keys: keys}
		s.authz = &authorizer{reviewer: allowIn("a"), keys: keys, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		c := &changesAccess{ctx: context.Background(), s: s, u: &user.DefaultInfo{Name: "u"}, f: flt, memo: map[Access]bool{},
			floors: map[string]int64{"a": 0}}
		v := c.keep([]byte(key), rev)
		if len(c.memo) > maxQuestions {
			t.Fatalf("%d questions", len(c.memo))
		}
		if v != mvcc.Take {
			return
		}
		o, ok := keys.Parse([]byte(key))
		switch {
		case !ok:
			t.Fatalf("%q (%+v): took %q, which holds no object, for a caller outside the raw-access groups", query, flt, key)
		case o.Namespace != "a":
			t.Fatalf("%q: took %q, outside the one namespace the caller may list", query, key)
		case flt.namespace != "" && o.Namespace != flt.namespace:
			t.Fatalf("%q: took %q, outside the namespace named", query, key)
		case flt.include != nil && !flt.include[o.Resource.String()], flt.exclude[o.Resource.String()]:
			t.Fatalf("%q: took %q (%s), outside the resources named", query, key, o.Resource)
		case strings.Contains(o.Namespace, "/"):
			t.Fatalf("%q: took %q, a namespace with a slash", query, key)
		}
	})
}
