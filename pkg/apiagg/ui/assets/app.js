// QuantyKube's history as a web page (ADR-047). Routes live in the URL's
// hash, so every view is a shareable URL that works after a reload, and
// every request is relative to the page (…/v1alpha1/ui/).
//
// Stable data-test attributes, for the browser tests:
//   timeline            the list of changes; timeline-entry: one change
//                       (data-revision, data-action), timeline-object: its
//                       link to the object, timeline-manager: its manager,
//                       timeline-burst: a group of close changes,
//                       timeline-status, timeline-empty, timeline-more,
//                       timeline-histogram
//   filter-namespace, filter-resource, filter-manager, filter-name,
//   filter-events, filter-apply, timeline-from, timeline-to,
//   zoom-in, zoom-out, window-earlier, window-later
//   object-title, object-deleted, revisions, object-revision (data-revision),
//   revision-manager, tab-diff, tab-blame, tab-restore, secret-toggle
//   diff, diff-pick, select-a, select-rev, diff-summary,
//   diff-row (data-field, data-changed="true"|"false")
//   blame, blame-row (data-field), blame-manager
//   restore-preview, restore-verdict (data-verdict="accepted"|"refused"),
//   restore-reason (kube-apiserver's message), restore-warning,
//   restore-confirm, restore-result, restore-done (data-new-revision)
//   deleted, deleted-row (data-revision), deleted-restore, error
//   revert-namespace, revert-since, revert-preview-button, revert-plan,
//   revert-row (data-key), revert-choose, revert-verdict (data-verdict),
//   revert-confirm, revert-result
import { h, clear } from './dom.js';
import { timelineView, stopLive } from './timeline.js';
import { objectView } from './object.js';
import { deletedView } from './deleted.js';
import { revertView } from './revert.js';

const views = { timeline: timelineView, object: objectView, deleted: deletedView, revert: revertView };

let generation = 0;

async function show() {
  const hash = location.hash.replace(/^#\/?/, '');
  const q = hash.indexOf('?');
  const name = (q < 0 ? hash : hash.slice(0, q)) || 'timeline';
  const params = new URLSearchParams(q < 0 ? '' : hash.slice(q + 1));
  stopLive();
  const main = clear(document.getElementById('main'));
  const view = views[name];
  const mine = ++generation;
  const target = h('div');
  main.appendChild(target);
  if (!view) {
    target.appendChild(h('p', { class: 'error', test: 'error' }, 'No such page: ' + name));
    return;
  }
  document.title = 'QuantyKube history · ' + name;
  await view(target, params);
  if (mine !== generation) return;
  main.focus({ preventScroll: true });
}

window.addEventListener('hashchange', show);
show();
