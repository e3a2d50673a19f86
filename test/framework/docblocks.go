package framework

import (
	"fmt"
	"strings"
)

// DocMarker begins the line before a sh block the tests run: the block
// is run as it is written, so the docs show what was proven.
const DocMarker = "<!-- test: "

// DocBlock is a sh block of a page that a marker line precedes.
type DocBlock struct {
	Marker string // the marker line, trimmed
	Line   int    // the marker's line, from 1
	Text   string // the block's lines, each ending in a newline
}

// DocBlocks are the marked sh blocks of text (the page named page, for
// errors), in order. A marker not followed by a ```sh block, or a block
// not closed, is an error: a test that skipped it would prove less than
// the page claims.
func DocBlocks(page, text string) ([]DocBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []DocBlock
	for i := 0; i < len(lines); i++ {
		m := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(m, DocMarker) {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			return nil, fmt.Errorf("%s:%d: %s is not followed by a ```sh block", page, i+1, m)
		}
		var body []string
		j := i + 2
		for ; j < len(lines) && lines[j] != "```"; j++ {
			body = append(body, lines[j])
		}
		if j == len(lines) {
			return nil, fmt.Errorf("%s:%d: the block is not closed", page, i+2)
		}
		blocks = append(blocks, DocBlock{Marker: m, Line: i + 1, Text: strings.Join(body, "\n") + "\n"})
		i = j
	}
	return blocks, nil
}
