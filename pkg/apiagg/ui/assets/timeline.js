// The timeline: the changes of a time window, newest first, grouped into
// bursts, filtered, and live while the window ends now.
import { get, prefix, prefixEnd } from './api.js';
import { h, clear, fmtTime, route, errorBox } from './dom.js';
import { action, changedFields, label, manager, stateOf } from './objects.js';

const maxPages = 20; // a window's first view reads at most this many pages
const pageLimit = 500;
const livePeriod = 5000;
// Changes this close together form a burst.
const burstGapMs = 10000;

let liveTimer = null;

export function stopLive() {
  if (liveTimer) clearTimeout(liveTimer);
  liveTimer = null;
}

// parseTime takes an ISO time, "now", or a relative "-1h", "-15m".
export function parseTime(s, now) {
  if (!s || s === 'now') return now;
  const m = /^-(\d+)([smhd])$/.exec(s);
  if (m) return now - Number(m[1]) * { s: 1e3, m: 6e4, h: 36e5, d: 864e5 }[m[2]];
  const t = Date.parse(s);
  return Number.isNaN(t) ? null : t;
}

function windowOf(p) {
  const now = Date.now();
  const to = parseTime(p.get('to') || 'now', now);
  const from = parseTime(p.get('from') || '-1h', now);
  return { from, to, live: !p.get('to') || p.get('to') === 'now' };
}

function params(p) {
  const out = [];
  if (p.get('ns')) out.push(['namespace', p.get('ns')]);
  for (const r of (p.get('resource') || '').split(',').filter(Boolean)) out.push(['resource', r]);
  if (!p.get('resource') && p.get('events') !== '1') {
    out.push(['exclude', 'events'], ['exclude', 'leases.coordination.k8s.io']);
  }
  return out;
}

// keep applies the filters the server does not: manager and name.
function keep(p, row) {
  const m = (p.get('manager') || '').toLowerCase();
  const n = (p.get('name') || '').toLowerCase();
  return (!m || row.manager.toLowerCase().includes(m)) && (!n || row.name.toLowerCase().includes(n));
}

function rowOf(e) {
  const { before, after } = stateOf(e);
  const l = label(e.deleted || !e.kv.object ? (e.prevKv || e.kv) : e.kv);
  const act = action(e);
  return {
    e, act, ...l,
    manager: act === 'deleted' ? '' : manager(after),
    fields: act === 'updated' ? changedFields(before, after) : [],
  };
}

function entry(row) {
  const f = row.fields;
  const shown = f.slice(0, 4).join(', ') + (f.length > 4 ? ' (+' + (f.length - 4) + ' more)' : '');
  return h('li', { class: 'entry ' + row.act, test: 'timeline-entry', 'data-revision': row.e.revision, 'data-action': row.act },
    h('span', { class: 'time' }, fmtTime(row.e.unixMs)),
    h('span', { class: 'rev' }, String(row.e.revision)),
    h('span', { class: 'act' }, row.act),
    h('a', { class: 'obj', test: 'timeline-object', href: route('object', { key: row.e.kv.key, rev: row.e.revision }) }, row.kind + '/' + row.name),
    h('span', { class: 'ns' }, row.namespace),
    h('span', { class: 'mgr', test: 'timeline-manager' }, row.manager || '-'),
    h('span', { class: 'fields' }, shown));
}

// bursts groups rows (newest first) whose changes lie within burstGapMs.
function bursts(rows) {
  const out = [];
  for (const r of rows) {
    const last = out[out.length - 1];
    if (last && last.oldest - r.e.unixMs <= burstGapMs) {
      last.rows.push(r);
      last.oldest = r.e.unixMs;
    } else {
      out.push({ rows: [r], newest: r.e.unixMs, oldest: r.e.unixMs });
    }
  }
  return out;
}

function burstList(rows) {
  return h('div', { class: 'bursts' }, bursts(rows).map((b) => h('details', { class: 'burst', test: 'timeline-burst', open: true },
    h('summary', {}, fmtTime(b.oldest) + ' – ' + fmtTime(b.newest).slice(11) + ' · ' + b.rows.length + ' change' + (b.rows.length === 1 ? '' : 's')),
    h('ol', { class: 'entries' }, b.rows.map(entry)))));
}

function isoOf(ms) { return new Date(ms).toISOString(); }

function controls(p, w) {
  const span = w.to - w.from;
  const at = (from, to, live) => route('timeline', { ...Object.fromEntries(p), from: isoOf(from), to: live ? 'now' : isoOf(to) });
  const field = (name, labelText, test) => h('label', {}, labelText,
    h('input', { name, value: p.get(name) || '', test, size: 12, autocomplete: 'off' }));
  const form = h('form', { class: 'filters', test: 'timeline-filters' },
    h('label', {}, 'From', h('input', { name: 'from', value: p.get('from') || '-1h', test: 'timeline-from', size: 20 })),
    h('label', {}, 'To', h('input', { name: 'to', value: p.get('to') || 'now', test: 'timeline-to', size: 20 })),
    field('ns', 'Namespace', 'filter-namespace'),
    field('resource', 'Resource', 'filter-resource'),
    field('manager', 'Manager', 'filter-manager'),
    field('name', 'Name', 'filter-name'),
    h('label', {}, h('input', { type: 'checkbox', name: 'events', value: '1', checked: p.get('events') === '1', test: 'filter-events' }), 'Events, Leases'),
    h('button', { type: 'submit', test: 'filter-apply' }, 'Show'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const fd = new FormData(form);
    const q = {};
    for (const [k, v] of fd) if (v) q[k] = v;
    location.hash = route('timeline', q);
  });
  const mid = (w.from + w.to) / 2;
  return h('div', { class: 'controls' }, form,
    h('nav', { class: 'zoom', 'aria-label': 'time window' },
      h('a', { href: at(w.from - span, w.to - span, false), test: 'window-earlier' }, '◀ Earlier'),
      h('a', { href: at(mid - span / 4, mid + span / 4, false), test: 'zoom-in' }, 'Zoom in'),
      h('a', { href: at(mid - span, mid + span, w.live), test: 'zoom-out' }, 'Zoom out'),
      w.live ? null : h('a', { href: at(w.from + span, w.to + span, w.to + span >= Date.now()), test: 'window-later' }, 'Later ▶'),
      h('span', { class: 'window' }, fmtTime(w.from) + ' – ' + (w.live ? 'now (live)' : fmtTime(w.to))),
      p.get('ns') ? h('a', { href: route('revert', { ns: p.get('ns'), since: isoOf(w.from) }), test: 'timeline-revert' }, 'Revert ' + p.get('ns') + ' to the window\'s start…') : null));
}

// histogram: the window's changes per slice, each bar a link to its slice.
function histogram(p, w, rows) {
  const n = 48;
  const counts = new Array(n).fill(0);
  const span = Math.max(1, w.to - w.from);
  for (const r of rows) counts[Math.min(n - 1, Math.max(0, Math.floor((r.e.unixMs - w.from) / span * n)))]++;
  const max = Math.max(1, ...counts);
  return h('div', { class: 'histogram', test: 'timeline-histogram', 'aria-hidden': 'true' }, counts.map((c, i) => {
    const from = w.from + span * i / n, to = from + span / n;
    const bar = h('a', { class: 'bar', tabindex: '-1', title: c + ' changes', href: route('timeline', { ...Object.fromEntries(p), from: isoOf(from), to: isoOf(to) }) });
    bar.appendChild(h('span', { class: 'fill h' + Math.round(c / max * 10) }));
    return bar;
  }));
}

export async function timelineView(main, p) {
  stopLive();
  const w = windowOf(p);
  if (w.from === null || w.to === null || w.from >= w.to) {
    main.appendChild(errorBox(new Error('give from and to as ISO times, now, or -15m, -2h, -1d, from before to')));
    return;
  }
  main.appendChild(h('h1', {}, 'Timeline'));
  main.appendChild(controls(p, w));
  const status = h('p', { class: 'note', test: 'timeline-status', 'aria-live': 'polite' }, 'Loading…');
  main.appendChild(status);
  const hist = h('div');
  const list = h('div', { test: 'timeline' });
  main.append(hist, list);
  const rows = [];
  let cont = '', header = 0, pages = 0;
  const more = h('button', { type: 'button', test: 'timeline-more', hidden: true }, 'Older changes');
  main.appendChild(more);
  const render = () => {
    clear(hist).appendChild(histogram(p, w, rows));
    const shown = rows.filter((r) => keep(p, r));
    clear(list).appendChild(shown.length ? burstList(shown) : h('p', { class: 'note', test: 'timeline-empty' }, 'No change in this window.'));
    status.textContent = shown.length + ' change' + (shown.length === 1 ? '' : 's') + (cont ? ' so far' : '') + (w.live ? ' · live' : '');
    more.hidden = !cont;
  };
  const page = async () => {
    const resp = await get('changes', {
      key: prefix, rangeEnd: prefixEnd, unixMs: Math.floor(w.from), endUnixMs: w.live ? 0 : Math.ceil(w.to),
      descending: true, limit: pageLimit, continue: cont,
    }, params(p));
    if (!header) header = resp.headerRevision;
    for (const e of resp.entries) rows.push(rowOf(e));
    cont = resp.continue || '';
    pages++;
  };
  more.addEventListener('click', async () => {
    more.disabled = true;
    try { await page(); render(); } catch (err) { main.appendChild(errorBox(err)); }
    more.disabled = false;
  });
  try {
    // A page can hold few entries (the server reads a bounded part of the
    // log per page): read on until the window is filled or pages run out.
    do { await page(); } while (cont && rows.length < pageLimit && pages < maxPages);
  } catch (err) {
    status.textContent = '';
    main.appendChild(errorBox(err));
    return;
  }
  render();
  if (w.live) live(p, w, rows, () => header, (v) => { header = v; }, render, main);
}

// live asks for the changes after the newest seen, as kubectl quanty
// changes --watch does, while this view is shown.
function live(p, w, rows, getHeader, setHeader, render, main) {
  const tick = async () => {
    try {
      // One request (its continue token is bound to it) from the newest
      // revision seen (the one after it may not exist yet, which the
      // store refuses), ascending, paged to its end.
      const from = getHeader();
      let cont = '', newest = 0;
      do {
        const resp = await get('changes', { key: prefix, rangeEnd: prefixEnd, revision: from, limit: pageLimit, continue: cont }, params(p));
        const fresh = resp.entries.filter((e) => e.revision > from).map(rowOf).reverse();
        rows.unshift(...fresh);
        if (!newest) newest = resp.headerRevision || 0;
        cont = resp.continue || '';
        if (fresh.length) render();
      } while (cont && liveTimer);
      if (!cont) setHeader(Math.max(getHeader(), newest));
    } catch (err) {
      main.appendChild(errorBox(err));
      return;
    }
    if (liveTimer) liveTimer = setTimeout(tick, livePeriod);
  };
  liveTimer = setTimeout(tick, livePeriod);
}
