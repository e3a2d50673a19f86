// An object's page: its revisions, a side-by-side diff of any two, blame
// per field, its deletion, and a restore of any revision (previewed and
// dry-run by kube-apiserver as the user before it is confirmed).
import { get, restore } from './api.js';
import { h, clear, fmtTime, ago, route, errorBox } from './dom.js';
import { action, flatten, isSecret, label, manager, secretPath, stateOf } from './objects.js';

const maxEntries = 1000;

// The whole retained log of one key, oldest first.
async function logOf(key) {
  const out = [];
  let cont = '';
  do {
    const resp = await get('logs', { key, limit: maxEntries, continue: cont });
    out.push(...resp.entries);
    cont = resp.continue || '';
  } while (cont && out.length < 10 * maxEntries);
  return out;
}

// mask replaces a Secret's values unless shown.
function masker(obj, show) {
  if (show || !isSecret(obj)) return (p, v) => v;
  return (p, v) => (v !== undefined && secretPath(p) ? '***' : v);
}

function revisionRow(e, p, sel) {
  const { after } = stateOf(e);
  const act = action(e);
  const here = (r) => route('object', { ...Object.fromEntries(p), rev: r });
  return h('tr', { test: 'object-revision', 'data-revision': e.revision, class: String(e.revision) === sel ? 'selected' : '' },
    h('td', {}, h('a', { href: here(e.revision) }, String(e.revision))),
    h('td', {}, fmtTime(e.unixMs)),
    h('td', {}, ago(e.unixMs)),
    h('td', {}, act),
    h('td', { test: 'revision-manager' }, act === 'deleted' ? '-' : manager(after) || '-'),
    h('td', {}, h('a', { href: route('object', { ...Object.fromEntries(p), a: e.revision, rev: '' }), test: 'diff-from' }, 'diff from')));
}

// stateAt is the object at revision rev: the newest entry at or below it.
function stateAt(entries, rev) {
  let s = null;
  for (const e of entries) {
    if (e.revision > rev) break;
    s = e;
  }
  return s;
}

// head names a diff's side: its entry's label, or its revision.
function head(e, obj) {
  if (!e) return 'absent';
  return (e.label || 'revision ' + e.revision) + (obj ? '' : ' (absent)');
}

function diffTable(a, b, ea, eb, show) {
  const ma = masker(a, show), mb = masker(b, show);
  const fa = flatten(a), fb = flatten(b);
  const paths = [...new Set([...fa.keys(), ...fb.keys()])].sort();
  const onlyChanged = paths.filter((x) => fa.get(x) !== fb.get(x));
  const rows = paths.map((x) => {
    const changed = fa.get(x) !== fb.get(x);
    let va = ma(x, fa.get(x)), vb = mb(x, fb.get(x));
    if (changed && va === '***' && vb === '***') { va = '*** (before)'; vb = '*** (after)'; }
    return h('tr', { test: 'diff-row', 'data-field': x, 'data-changed': changed ? 'true' : 'false', class: changed ? 'changed' : '' },
      h('th', { scope: 'row' }, x),
      h('td', { class: 'a' }, va === undefined ? '' : va),
      h('td', { class: 'b' }, vb === undefined ? '' : vb));
  });
  return h('div', { class: 'scroll' },
    h('p', { class: 'note', test: 'diff-summary' }, onlyChanged.length + ' field' + (onlyChanged.length === 1 ? '' : 's') + ' differ'),
    h('table', { class: 'diff', test: 'diff' },
      h('thead', {}, h('tr', {}, h('th', {}, 'field'),
        h('th', {}, head(ea, a)),
        h('th', {}, head(eb, b)))),
      h('tbody', {}, rows)));
}

// blame: for each field of the object at entries[upto], the change that
// last set it to its value, and that change's manager.
function blameTable(entries, upto, show) {
  const last = new Map(); // path -> [value, entry]
  for (const e of entries.slice(0, upto + 1)) {
    const { after } = stateOf(e);
    const f = flatten(after);
    for (const [p, v] of f) {
      const prev = last.get(p);
      if (!prev || prev[0] !== v) last.set(p, [v, e]);
    }
    for (const p of [...last.keys()]) if (!f.has(p)) last.delete(p);
  }
  const obj = stateOf(entries[upto]).after;
  const m = masker(obj, show);
  return h('div', { class: 'scroll' }, h('table', { class: 'blame', test: 'blame' },
    h('thead', {}, h('tr', {}, h('th', {}, 'field'), h('th', {}, 'value'), h('th', {}, 'revision'), h('th', {}, 'when'), h('th', {}, 'manager'))),
    h('tbody', {}, [...last.entries()].sort((x, y) => (x[0] < y[0] ? -1 : 1)).map(([p, [v, e]]) =>
      h('tr', { test: 'blame-row', 'data-field': p },
        h('th', { scope: 'row' }, p),
        h('td', {}, m(p, v)),
        h('td', {}, String(e.revision)),
        h('td', { title: fmtTime(e.unixMs) }, ago(e.unixMs) + ' ago'),
        h('td', { test: 'blame-manager' }, manager(stateOf(e).after) || '-'))))));
}

function deletion(entries) {
  const e = entries[entries.length - 1];
  if (!e || !e.deleted) return null;
  const before = e.prevKv && e.prevKv.object;
  const by = before && before.metadata && before.metadata.deletionTimestamp
    ? 'its deletion began at ' + before.metadata.deletionTimestamp + ' (finalizers ran, the last by ' + (manager(before) || 'an unnamed manager') + ')'
    : 'the store does not record who deletes (kube-apiserver\'s audit log does)';
  return h('p', { class: 'gone', test: 'object-deleted' },
    'Deleted at ' + fmtTime(e.unixMs) + ' (revision ' + e.revision + '); ' + by + '.');
}

export async function objectView(main, p) {
  const key = p.get('key');
  if (!key) {
    main.appendChild(errorBox(new Error('no key: open an object from the timeline')));
    return;
  }
  let entries;
  try {
    entries = await logOf(key);
  } catch (err) {
    main.appendChild(errorBox(err));
    return;
  }
  if (!entries.length) {
    main.appendChild(errorBox(new Error('no retained change of ' + key)));
    return;
  }
  const newest = entries[entries.length - 1];
  const l = label(newest.deleted ? newest.prevKv || newest.kv : newest.kv);
  main.appendChild(h('h1', { test: 'object-title' }, l.kind + '/' + l.name, l.namespace ? h('span', { class: 'ns' }, ' in ' + l.namespace) : null));
  main.appendChild(h('p', { class: 'note key' }, key));
  const del = deletion(entries);
  if (del) main.appendChild(del);

  const revB = Number(p.get('rev')) || newest.revision;
  const ib = entries.findIndex((e) => e.revision === (stateAt(entries, revB) || newest).revision);
  const eb = entries[ib];
  const ea = p.get('a') ? stateAt(entries, Number(p.get('a'))) : entries[ib - 1] || null;
  const show = p.get('secrets') === 'show';
  const secret = isSecret(stateOf(eb).after || stateOf(eb).before);

  const tabs = h('nav', { class: 'tabs' },
    h('a', { href: route('object', { ...Object.fromEntries(p), view: '' }), test: 'tab-diff', 'aria-current': p.get('view') ? null : 'page' }, 'Diff'),
    h('a', { href: route('object', { ...Object.fromEntries(p), view: 'blame' }), test: 'tab-blame', 'aria-current': p.get('view') === 'blame' ? 'page' : null }, 'Blame'),
    h('a', { href: route('object', { ...Object.fromEntries(p), view: 'restore' }), test: 'tab-restore', 'aria-current': p.get('view') === 'restore' ? 'page' : null }, 'Restore revision ' + eb.revision),
    secret ? h('a', { href: route('object', { ...Object.fromEntries(p), secrets: show ? '' : 'show' }), test: 'secret-toggle', role: 'button' }, show ? 'Mask Secret values' : 'Show Secret values') : null);

  const picker = h('form', { class: 'pick', test: 'diff-pick' },
    h('label', {}, 'From ', selectOf('a', entries, ea ? ea.revision : '')),
    h('label', {}, 'to ', selectOf('rev', entries, eb.revision)),
    h('button', { type: 'submit' }, 'Compare'));
  picker.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const fd = new FormData(picker);
    location.hash = route('object', { ...Object.fromEntries(p), a: fd.get('a'), rev: fd.get('rev') });
  });

  const body = h('section', { class: 'view' });
  main.append(tabs, body);
  if (p.get('view') === 'blame') {
    body.append(h('h2', {}, 'Blame at revision ' + eb.revision), blameTable(entries, ib, show));
  } else if (p.get('view') === 'restore') {
    const { restoreView } = await import('./restore.js');
    restoreView(body, key, entries, eb, show);
  } else {
    body.append(h('h2', {}, 'Diff'), picker, diffTable(ea ? stateOf(ea).after : null, stateOf(eb).after, ea, eb, show));
  }
  main.appendChild(h('h2', {}, 'Revisions'));
  main.appendChild(h('div', { class: 'scroll' }, h('table', { class: 'revisions', test: 'revisions' },
    h('thead', {}, h('tr', {}, ['revision', 'time', 'age', 'action', 'manager', ''].map((x) => h('th', {}, x)))),
    h('tbody', {}, entries.slice().reverse().map((e) => revisionRow(e, p, String(eb.revision)))))));
}

function selectOf(name, entries, selected) {
  return h('select', { name, test: 'select-' + name },
    h('option', { value: '' }, '(absent)'),
    entries.slice().reverse().map((e) => h('option', { value: e.revision, selected: String(e.revision) === String(selected) },
      e.revision + ' · ' + action(e) + ' · ' + fmtTime(e.unixMs))));
}

export { diffTable };
