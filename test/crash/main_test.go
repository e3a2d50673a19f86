package crash

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// quoteVal shortens a value for messages.
func quoteVal(v string) string {
	if i := bytes.IndexByte([]byte(v), '|'); i >= 0 {
		v = v[:i]
	}
	return fmt.Sprintf("%q", v)
}
