// A restore from the page: first a dry run (the store checks it as it
// would write it, and kube-apiserver judges the same change as the user),
// showing exactly what would be written; then, on confirm, the write,
// conditional on the object being as the preview showed it.
import { restore } from './api.js';
import { h, clear, errorBox } from './dom.js';
import { diffTable } from './object.js';
import { stateOf } from './objects.js';

function verdict(ok, text) {
  return h('p', { class: 'verdict ' + (ok ? 'ok' : 'refused'), test: 'restore-verdict', 'data-verdict': ok ? 'accepted' : 'refused', role: 'status' },
    ok ? 'kube-apiserver accepts this change from you (dry run). ' : 'Refused: ',
    ok ? text : h('span', { test: 'restore-reason' }, text));
}

export async function restoreView(body, key, entries, eb, show) {
  const newest = entries[entries.length - 1];
  const live = newest.deleted ? null : stateOf(newest).after;
  const target = stateOf(eb).after;
  body.appendChild(h('h2', {}, 'Restore revision ' + eb.revision + (target ? '' : ' (absent: a delete)')));
  const out = h('div', { test: 'restore-preview', 'aria-live': 'polite' }, h('p', { class: 'note' }, 'Asking kube-apiserver for a dry run…'));
  body.appendChild(out);
  // The write goes through only over the state previewed.
  const ifMod = newest.deleted ? 0 : newest.kv.modRevision;
  let preview;
  try {
    preview = await restore({ key, revision: eb.revision }, true);
  } catch (err) {
    clear(out).appendChild(verdict(false, err.message));
    return;
  }
  const written = preview.body.kv ? preview.body.kv.object : null;
  clear(out);
  if (preview.warning) out.appendChild(h('p', { class: 'warning', test: 'restore-warning' }, preview.warning));
  out.appendChild(verdict(true, 'What would be written, against the object now:'));
  out.appendChild(diffTable(live, written, { label: 'now (revision ' + newest.revision + ')' }, { label: 'to be written' }, show));
  const confirm = h('button', { type: 'button', class: 'danger', test: 'restore-confirm' }, 'Restore revision ' + eb.revision);
  const result = h('div', { test: 'restore-result', 'aria-live': 'polite' });
  confirm.addEventListener('click', async () => {
    confirm.disabled = true;
    try {
      const done = await restore({ key, revision: eb.revision, ifModRevision: ifMod }, false);
      const nr = done.body.newRevision;
      clear(result).appendChild(h('p', { class: 'ok', test: 'restore-done', 'data-new-revision': nr || '' },
        nr ? 'Restored: new revision ' + nr + '.' : 'Nothing written: it is already as it was.'));
    } catch (err) {
      clear(result).appendChild(h('div', {}, verdict(false, err.message), err.code === 409 ? errorBox(new Error('the object changed since the preview: reload to see it')) : null));
    }
  });
  out.append(confirm, result);
}
