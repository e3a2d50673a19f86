package history

import (
	"testing"

	"github.com/quantyroot/quantykube/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }
