package main

// What the commands over many objects share: label selectors, times that
// must be in the past, and the types a command is given.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
)

// parseSelector parses -l as kubectl does (k8s.io/apimachinery's labels
// syntax): nil without one.
func parseSelector(s string) (labels.Selector, error) {
	if s == "" {
		return nil, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("-l %q: %w", s, err)
	}
	return sel, nil
}

// selects reports whether sel (nil: everything) matches the labels of
// obj (nil: no labels).
func selects(sel labels.Selector, obj map[string]any) bool {
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

// pastTime reads a TIME flag (a bare duration as kubectl logs --since
// takes it too) that must not be in the future: history has nothing
// there, and a sign typed the wrong way round (+1h) is a mistake.
func (s *session) pastTime(flag, v string) (int64, error) {
	now := s.now()
	ms, err := parseSince(flag, v, now)
	if err != nil {
		return 0, err
	}
	if ms > now.UnixMilli() {
		return 0, fmt.Errorf("--%s %s is %s in the future: history ends now", flag, v,
			(time.Duration(ms-now.UnixMilli()) * time.Millisecond).Round(time.Second))
	}
	return ms, nil
}

// types resolves the TYPE arguments (each may be a comma-separated
// list, as kubectl get takes), as kubectl does; an unknown one is
// kubectl's error.
func (s *session) types(ctx context.Context, args []string) ([]apiResource, error) {
	var rs []apiResource
	for _, a := range args {
		for _, typ := range strings.Split(a, ",") {
			if typ == "" {
				continue
			}
			if strings.Contains(typ, "/") {
				return nil, fmt.Errorf("%q: want a type (TYPE[,TYPE...]), not TYPE/NAME", typ)
			}
			r, err := s.disc.resolve(ctx, typ)
			if err != nil {
				return nil, err
			}
			rs = append(rs, r)
		}
	}
	return rs, nil
}
