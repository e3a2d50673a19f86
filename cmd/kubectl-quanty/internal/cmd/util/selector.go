package util

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
)

// ParseSelector parses -l as kubectl does (k8s.io/apimachinery's labels
// syntax): nil without one.
func ParseSelector(s string) (labels.Selector, error) {
	if s == "" {
		return nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", s, err)
	}
	return sel, nil
}

// Selects reports whether sel (nil: everything) matches the labels of
// obj (nil: no labels).
func Selects(sel labels.Selector, obj map[string]any) bool {
	if sel == nil {
		return true
	}
	meta, _ := obj["metadata"].(map[string]any)
	m, _ := meta["labels"].(map[string]any)
	set := labels.Set{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			set[k] = s
		}
	}
	return sel.Matches(set)
}
