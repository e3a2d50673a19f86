package changes

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/cmd/util"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/objects"
	"github.com/quantyroot/quantykube/cmd/kubectl-quanty/internal/terminal"
	"github.com/quantyroot/quantykube/proto/historypb"
)

// watch polls for the changes after revision from, oldest first,
// every watchInterval, and prints them, until ctx ends (an interrupt):
// then it returns nil, as kubectl get --watch ends.
func (o *Options) watch(ctx context.Context, q *query, from int64, p *printer) error {
	q.limit = 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(watchInterval):
		}
		// From the revision already seen, not the one after it, which
		// QuantyKube refuses as a future revision until it is written.
		req := &historypb.Request{Key: q.req.Key, RangeEnd: q.req.RangeEnd, Revision: from}
		rows, header, err := o.read(ctx, &query{req: req, params: q.params, sel: q.sel, since: q.since})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		rows = slices.DeleteFunc(rows, func(r Row) bool { return r.Revision <= from })
		if err := p.print(rows, false); err != nil {
			return err
		}
		// On from what was read: the newest change printed, or the
		// store's revision when the first page was read, whichever is
		// later (a change filtered out need not be read again).
		from = max(from, header)
		for _, r := range rows {
			from = max(from, r.Revision)
		}
	}
}

// printer prints rows as a table, or as JSON or YAML documents.
type printer struct {
	o      *Options
	format string
	all    bool // -A: the NAMESPACE column
	header bool // printed
}

// print prints rows; list says they are the whole listing (one document
// for -o json and yaml), not a batch that --watch found.
func (p *printer) print(rows []Row, list bool) error {
	o := p.o
	for i := range rows {
		rows[i].Time = o.clock.When(rows[i].UnixMs)
	}
	switch {
	case (p.format == "json" || p.format == "yaml") && list:
		if rows == nil {
			rows = []Row{}
		}
		b, err := terminal.Render(map[string]any{"changes": rows}, p.format)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	case p.format == "json" || p.format == "yaml":
		for _, r := range rows {
			b, err := terminal.Render(r, p.format)
			if err != nil {
				return err
			}
			if p.format == "yaml" {
				b = append([]byte("---\n"), b...)
			}
			if _, err := o.Out.Write(b); err != nil {
				return err
			}
		}
		return nil
	}
	if len(rows) == 0 {
		if list {
			fmt.Fprintln(o.ErrOut, "No changes found.")
		}
		return nil
	}
	tw := terminal.NewTabular(o.Out, 3)
	if !p.header {
		cols := []string{"TIME", "REVISION", "ACTION", "OBJECT"}
		if p.all {
			cols = append(cols, "NAMESPACE")
		}
		fmt.Fprintln(tw, strings.Join(append(cols, "MANAGER", "CHANGES"), "\t"))
		p.header = true
	}
	for _, r := range rows {
		action := r.Action
		if r.RestoredFrom != 0 {
			action = fmt.Sprintf("restored (revision %d)", r.RestoredFrom)
		}
		changes := objects.Summarize(r.Changes)
		if p.format == "wide" {
			changes = strings.Join(r.Changes, ", ")
		}
		if r.Note != "" {
			changes = "(" + r.Note + ")"
		}
		cells := []string{r.Time, fmt.Sprint(r.Revision), action, r.Type + "/" + r.Name}
		if p.all {
			cells = append(cells, util.Dash(r.Namespace))
		}
		fmt.Fprintln(tw, strings.Join(append(cells, util.Dash(r.Manager), changes), "\t"))
	}
	return tw.Flush()
}
