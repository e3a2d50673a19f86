// h builds an element: every string becomes a text node (textContent),
// never markup, so that nothing from an object is ever parsed as HTML.
// Attributes are set one by one; href only ever takes a URL the page made
// itself (hash routes), never one from an object.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'test') el.setAttribute('data-test', v);
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function fmtTime(ms) {
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}

export function ago(ms) {
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 60) return s + 's';
  if (s < 3600) return Math.round(s / 60) + 'm';
  if (s < 86400) return Math.round(s / 3600) + 'h';
  return Math.round(s / 86400) + 'd';
}

// route is a hash route: #/name?k=v&…
export function route(name, params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') u.set(k, String(v));
  }
  const q = u.toString();
  return '#/' + name + (q ? '?' + q : '');
}

export function errorBox(err) {
  return h('p', { class: 'error', test: 'error', role: 'alert' }, err && err.message ? err.message : String(err));
}
