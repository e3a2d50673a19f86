package diff

import (
	"crypto/sha256"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
)

// Snapshot is an object at one point in its history.
type Snapshot struct {
	Rev   int64            // the revision read
	KV    *mvccpb.KeyValue // nil: it did not exist then
	Label string           // for the diff's header: "revision 12 (now)"
}

// content is what a diff shows of the snapshot: the object as kubectl
// get shows it, without resourceVersion and managedFields (a copy, to
// mask), or for a value that is not an object, a comment line saying
// what it is (for an encrypted one, with a hash of its ciphertext, so
// that a change still shows). Both are empty when it did not exist.
func (v Snapshot) content() (map[string]any, string) {
	if v.KV == nil {
		return nil, ""
	}
	val := objects.Decode(v.KV.Value)
	if val.Object == nil {
		note := val.Describe()
		if val.Encrypted != "" {
			note += fmt.Sprintf(", sha256:%x", sha256.Sum256(v.KV.Value))
		}
		return nil, "# " + note + "\n"
	}
	return val.Shown(0, false), ""
}

// Texts are the YAML texts of two snapshots as a diff shows them, a
// Secret's values masked (objects.MaskSecrets) unless showSecrets.
func Texts(from, to Snapshot, showSecrets bool) (string, string, error) {
	a, noteA := from.content()
	b, noteB := to.content()
	if !showSecrets {
		objects.MaskSecrets(a, b)
	}
	text := func(obj map[string]any, note string) (string, error) {
		if obj == nil {
			return note, nil
		}
		y, err := terminal.Render(obj, "yaml")
		return string(y), err
	}
	ta, err := text(a, noteA)
	if err != nil {
		return "", "", err
	}
	tb, err := text(b, noteB)
	return ta, tb, err
}

// Of is the unified diff of two snapshots of the object named name
// ("configmap/web"), "" when they show the same.
func Of(name string, from, to Snapshot, showSecrets bool) (string, error) {
	a, b, err := Texts(from, to, showSecrets)
	if err != nil {
		return "", err
	}
	return Unified(name+" ("+from.Label+")", name+" ("+to.Label+")", a, b), nil
}

// StateRevision names the state read at revision rev: the object's own
// revision (its resourceVersion, the one log lists and get prints), not
// the store's, which every write anywhere moves on; rev when it did not
// exist.
func StateRevision(rev int64, kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return rev
	}
	return kv.ModRevision
}
