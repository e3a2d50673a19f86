// Revert: every object of a namespace changed since a time, back as it
// was then. Each is dry-run first (kube-apiserver's verdict as the user,
// per object); the confirm restores those accepted and still chosen,
// each only over the state the preview saw.
import { get, restore, prefix, prefixEnd } from './api.js';
import { h, fmtTime, route, errorBox } from './dom.js';
import { label } from './objects.js';
import { parseTime } from './timeline.js';

const pageLimit = 1000;
const maxPages = 30;

export async function revertView(main, p) {
  const since = parseTime(p.get('since') || '', Date.now());
  main.appendChild(h('h1', {}, 'Revert a namespace'));
  const form = h('form', { class: 'filters' },
    h('label', {}, 'Namespace', h('input', { name: 'ns', value: p.get('ns') || '', size: 14, test: 'revert-namespace', required: true })),
    h('label', {}, 'Since', h('input', { name: 'since', value: p.get('since') || '-30m', size: 22, test: 'revert-since' })),
    h('button', { type: 'submit', test: 'revert-preview-button' }, 'Preview'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = {};
    for (const [k, v] of new FormData(form)) if (v) q[k] = v;
    location.hash = route('revert', q);
  });
  main.appendChild(form);
  const ns = p.get('ns');
  if (!ns || !p.get('since')) return;
  if (since === null) {
    main.appendChild(errorBox(new Error('give since as an ISO time or -30m, -2h')));
    return;
  }
  // The newest change of each key changed since then: what is there now.
  const latest = new Map();
  let cont = '', pages = 0;
  try {
    do {
      const resp = await get('changes', { key: prefix, rangeEnd: prefixEnd, unixMs: Math.floor(since), descending: true, limit: pageLimit, continue: cont },
        [['namespace', ns], ['exclude', 'events'], ['exclude', 'leases.coordination.k8s.io']]);
      for (const e of resp.entries) if (!latest.has(e.kv.key)) latest.set(e.kv.key, e);
      cont = resp.continue || '';
      pages++;
    } while (cont && pages < maxPages);
  } catch (err) {
    main.appendChild(errorBox(err));
    return;
  }
  if (cont) main.appendChild(errorBox(new Error('more changes than one preview reads: narrow the window')));
  main.appendChild(h('p', { class: 'note' }, latest.size + ' object' + (latest.size === 1 ? '' : 's') + ' changed in ' + ns + ' since ' + fmtTime(since) + '; each dry-run as you:'));
  const rows = [];
  const tbody = h('tbody');
  main.appendChild(h('div', { class: 'scroll' }, h('table', { test: 'revert-plan' },
    h('thead', {}, h('tr', {}, ['', 'object', 'now', 'verdict'].map((x) => h('th', {}, x)))), tbody)));
  for (const [key, e] of latest) {
    const l = label(e.deleted ? e.prevKv || e.kv : e.kv);
    const box = h('input', { type: 'checkbox', 'aria-label': 'revert ' + l.kind + '/' + l.name, test: 'revert-choose' });
    const verdict = h('td', { test: 'revert-verdict' }, '…');
    tbody.appendChild(h('tr', { test: 'revert-row', 'data-key': key },
      h('td', {}, box),
      h('td', {}, h('a', { href: route('object', { key }) }, l.kind + '/' + l.name)),
      h('td', {}, e.deleted ? 'deleted' : 'revision ' + e.kv.modRevision),
      verdict));
    const row = { key, ifMod: e.deleted ? 0 : e.kv.modRevision, box, verdict, ok: false };
    rows.push(row);
    try {
      const r = await restore({ key, unixMs: Math.floor(since) }, true);
      row.ok = true;
      box.checked = true;
      verdict.textContent = r.body.kv ? 'accepted: back as at ' + fmtTime(since)
        : e.deleted ? 'nothing to do: absent then and now' : 'accepted: deleted (it did not exist then)';
      verdict.setAttribute('data-verdict', 'accepted');
    } catch (err) {
      box.disabled = true;
      verdict.textContent = 'refused: ' + err.message;
      verdict.setAttribute('data-verdict', 'refused');
    }
  }
  const confirm = h('button', { type: 'button', class: 'danger', test: 'revert-confirm' }, 'Revert the chosen objects');
  const result = h('p', { test: 'revert-result', 'aria-live': 'polite' });
  confirm.addEventListener('click', async () => {
    confirm.disabled = true;
    let done = 0, failed = 0;
    for (const row of rows) {
      if (!row.ok || !row.box.checked) continue;
      try {
        const r = await restore({ key: row.key, unixMs: Math.floor(since), ifModRevision: row.ifMod }, false);
        row.verdict.textContent = r.body.newRevision ? 'reverted: new revision ' + r.body.newRevision : 'already as it was';
        done++;
      } catch (err) {
        row.verdict.textContent = 'not reverted: ' + err.message;
        failed++;
      }
      row.box.disabled = true;
    }
    result.textContent = done + ' reverted' + (failed ? ', ' + failed + ' not (see each)' : '') + '.';
  });
  main.append(confirm, result);
}
