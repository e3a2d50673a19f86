package objects

// Which fields a change touched, as paths a person reads in kubectl's
// terms: spec.replicas, data.color, metadata.labels["app.kubernetes.io/name"],
// spec.template.spec.containers[0].image.

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// bookkeeping are fields every write changes, or that only follow from
// another change, and would drown the ones a person made.
var bookkeeping = []string{"metadata.resourceVersion", "metadata.managedFields", "metadata.generation"}

// ChangedFields are the paths where before and after differ, sorted;
// nil when either is not an object.
func ChangedFields(before, after map[string]any) []string {
	if before == nil || after == nil {
		return nil
	}
	var paths []string
	walkMap("", before, after, &paths)
	slices.Sort(paths)
	return paths
}

var plainKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// Child is the path of key below path.
func Child(path, key string) string {
	if !plainKey.MatchString(key) {
		return fmt.Sprintf("%s[%q]", path, key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// walk adds the paths at or below path where a and b differ. Maps are
// compared key by key, lists of the same length item by item; a list that
// grew or shrank is one change.
func walk(path string, a, b any, paths *[]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	switch am := a.(type) {
	case map[string]any:
		if bm, ok := b.(map[string]any); ok {
			walkMap(path, am, bm, paths)
			return
		}
	case []any:
		if bl, ok := b.([]any); ok && len(bl) == len(am) {
			for i := range am {
				walk(fmt.Sprintf("%s[%d]", path, i), am[i], bl[i], paths)
			}
			return
		}
	}
	*paths = append(*paths, path)
}

func walkMap(path string, a, b map[string]any, paths *[]string) {
	for k, av := range a {
		p := Child(path, k)
		if slices.Contains(bookkeeping, p) {
			continue
		}
		if bv, ok := b[k]; ok {
			walk(p, av, bv, paths)
		} else {
			*paths = append(*paths, p)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			if p := Child(path, k); !slices.Contains(bookkeeping, p) {
				*paths = append(*paths, p)
			}
		}
	}
}

// maxShownFields bounds the changes column of a table.
const maxShownFields = 4

// Summarize is the changes column: the first few paths and how many more.
func Summarize(paths []string) string {
	if len(paths) <= maxShownFields {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s (+%d more)", strings.Join(paths[:maxShownFields], ", "), len(paths)-maxShownFields)
}
