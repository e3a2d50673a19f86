package util

import (
	"fmt"
	"strings"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/discovery"
	"github.com/quantyroot/quantykube/pkg/storagekey"
)

// Target is what a command's arguments name: an object, or a raw key.
type Target struct {
	Resource discovery.Resource // zero for --key
	Object   storagekey.Object
	Key      string
}

// TargetIn is the object name of res, in namespace ns if res is
// namespaced.
func TargetIn(tab *storagekey.Table, res discovery.Resource, name, ns string) (Target, error) {
	o := storagekey.Object{Resource: res.Resource, Name: name}
	if res.Namespaced {
		o.Namespace = ns
	}
	key, err := tab.Key(o)
	if err != nil {
		return Target{}, err
	}
	return Target{Resource: res, Object: o, Key: key}, nil
}

// String names the target for people: kubectl's TYPE/NAME, with the
// namespace, or the raw key.
func (t Target) String() string {
	if t.Resource.Kind == "" {
		return fmt.Sprintf("key %q", t.Key)
	}
	if t.Object.Namespace == "" {
		return t.Resource.TypeName() + "/" + t.Object.Name
	}
	return fmt.Sprintf("%s/%s in namespace %s", t.Resource.TypeName(), t.Object.Name, t.Object.Namespace)
}

// NameOnly is -o name's line.
func (t Target) NameOnly() string {
	if t.Resource.Kind == "" {
		return t.Key
	}
	return t.Resource.TypeName() + "/" + t.Object.Name
}

// DiffFile names the object's file for an external diff as kubectl diff
// does: group.version.kind.namespace.name.
func (t Target) DiffFile() string {
	if t.Resource.Kind == "" {
		return strings.ReplaceAll(strings.Trim(t.Key, "/"), "/", ".")
	}
	parts := []string{t.Resource.Group, t.Resource.Version, t.Resource.Kind, t.Object.Namespace, t.Object.Name}
	if t.Resource.Group == "" {
		parts = parts[1:]
	}
	if t.Object.Namespace == "" {
		parts = append(parts[:len(parts)-2], t.Object.Name)
	}
	return strings.Join(parts, ".")
}
