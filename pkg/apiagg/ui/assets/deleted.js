// Deleted objects and namespaces: what the window's changes deleted and
// nothing created again since, Events past their TTL included.
import { get, prefix, prefixEnd } from './api.js';
import { h, fmtTime, route, errorBox } from './dom.js';
import { label } from './objects.js';
import { parseTime } from './timeline.js';

const pageLimit = 1000;
const maxPages = 30;

export async function deletedView(main, p) {
  const now = Date.now();
  const from = parseTime(p.get('from') || '-24h', now);
  main.appendChild(h('h1', {}, 'Deleted'));
  const form = h('form', { class: 'filters' },
    h('label', {}, 'Since', h('input', { name: 'from', value: p.get('from') || '-24h', size: 20 })),
    h('label', {}, 'Namespace', h('input', { name: 'ns', value: p.get('ns') || '', size: 12, test: 'deleted-namespace' })),
    h('label', {}, 'Resource', h('input', { name: 'resource', value: p.get('resource') || '', size: 12, test: 'deleted-resource' })),
    h('button', { type: 'submit' }, 'Show'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = {};
    for (const [k, v] of new FormData(form)) if (v) q[k] = v;
    location.hash = route('deleted', q);
  });
  main.appendChild(form);
  if (from === null) {
    main.appendChild(errorBox(new Error('give since as an ISO time or -1h, -2d')));
    return;
  }
  const status = h('p', { class: 'note', 'aria-live': 'polite' }, 'Loading…');
  main.appendChild(status);
  const params = [];
  if (p.get('ns')) params.push(['namespace', p.get('ns')]);
  for (const r of (p.get('resource') || '').split(',').filter(Boolean)) params.push(['resource', r]);
  if (!p.get('resource')) params.push(['exclude', 'leases.coordination.k8s.io']);
  // Newest first: a key's first change seen is its last; if that is a
  // delete, the object is gone.
  const seen = new Set();
  const gone = [];
  let cont = '', pages = 0;
  try {
    do {
      const resp = await get('changes', { key: prefix, rangeEnd: prefixEnd, unixMs: Math.floor(from), descending: true, limit: pageLimit, continue: cont }, params);
      for (const e of resp.entries) {
        if (seen.has(e.kv.key)) continue;
        seen.add(e.kv.key);
        if (e.deleted) gone.push(e);
      }
      cont = resp.continue || '';
      pages++;
    } while (cont && pages < maxPages);
  } catch (err) {
    status.textContent = '';
    main.appendChild(errorBox(err));
    return;
  }
  status.textContent = gone.length + ' deleted and still gone' + (cont ? ' (the newest ' + pages * pageLimit + ' changes read; narrow the window for more)' : '');
  main.appendChild(h('div', { class: 'scroll' }, h('table', { test: 'deleted' },
    h('thead', {}, h('tr', {}, ['object', 'namespace', 'deleted', 'revision', ''].map((x) => h('th', {}, x)))),
    h('tbody', {}, gone.map((e) => {
      const l = label(e.prevKv || e.kv);
      const before = e.prevKv ? e.prevKv.modRevision : 0;
      return h('tr', { test: 'deleted-row', 'data-revision': e.revision },
        h('td', {}, h('a', { href: route('object', { key: e.kv.key }) }, l.kind + '/' + l.name)),
        h('td', {}, l.namespace),
        h('td', {}, fmtTime(e.unixMs)),
        h('td', {}, String(e.revision)),
        h('td', {}, before ? h('a', { href: route('object', { key: e.kv.key, rev: before, view: 'restore' }), test: 'deleted-restore' }, 'restore') : ''));
    })))));
}
