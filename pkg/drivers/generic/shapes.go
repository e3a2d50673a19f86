package generic

import (
	"strings"

	"github.com/quantyroot/quantykube/pkg/mvcc"
)

// Helpers for writing the statements a query's shapes need
// (mvcc.Statements), once, when a dialect's package is initialized.

// Shapes is the statement write gives for each key shape.
func Shapes(write func(mvcc.KeyShape) string) mvcc.Shaped {
	return mvcc.Shaped{One: write(mvcc.OneKey), From: write(mvcc.FromKey), Between: write(mvcc.KeyBetween)}
}

// Spans is the statement write gives for each key shape of more than one
// key.
func Spans(write func(mvcc.KeyShape) string) mvcc.Spans {
	return mvcc.Spans{From: write(mvcc.FromKey), Between: write(mvcc.KeyBetween)}
}

// IDLists is the statement write gives for each length of mvcc.IDListSizes.
func IDLists(write func(n int) string) mvcc.IDLists {
	var out mvcc.IDLists
	for i, n := range mvcc.IDListSizes {
		out[i] = write(n)
	}
	return out
}

// KeyCond is a key range's condition on col with ? placeholders (SQLite's
// and MySQL's): its arguments are the range's key, and end for
// mvcc.KeyBetween.
func KeyCond(col string, s mvcc.KeyShape) string {
	switch s {
	case mvcc.OneKey:
		return col + " = ?"
	case mvcc.FromKey:
		return col + " >= ?"
	}
	return col + " >= ? AND " + col + " < ?"
}

// List is n ? placeholders, separated by commas.
func List(n int) string {
	return "?" + strings.Repeat(", ?", n-1)
}
