// The aggregated API as the page calls it: the same endpoints as
// kubectl quanty, relative to the page (…/v1alpha1/ui/), so that the page
// works through kube-apiserver and behind kubectl quanty ui's proxy alike.
// Answers are asked for in JSON, values decoded by the server (plain
// application/json answers protobuf, as kubectl get --raw expects).
const jsonType = 'application/json;as=decoded';

// encodeRequest is a quantykube.Request (proto/history.proto) in protobuf.
export function encodeRequest(r) {
  const out = [];
  const varint = (n) => {
    while (n > 127) { out.push((n % 128) | 128); n = Math.floor(n / 128); }
    out.push(n);
  };
  const tag = (num, wt) => varint(num * 8 + wt);
  const bytes = (num, s) => {
    if (s === undefined || s === null || s === '') return;
    const b = new TextEncoder().encode(s);
    tag(num, 2); varint(b.length);
    for (const x of b) out.push(x);
  };
  const int = (num, v) => { if (v) { tag(num, 0); varint(v); } };
  bytes(1, r.key);
  bytes(2, r.rangeEnd);
  int(3, r.revision);
  int(4, r.unixMs);
  int(5, r.limit);
  bytes(6, r.continue);
  if (r.ifModRevision !== undefined && r.ifModRevision !== null) { tag(7, 0); varint(r.ifModRevision); }
  int(8, r.endRevision);
  int(9, r.endUnixMs);
  if (r.descending) { tag(10, 0); varint(1); }
  return new Uint8Array(out);
}

export function base64url(b) {
  let s = '';
  for (const x of b) s += String.fromCharCode(x);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

// ApiError carries kube-apiserver's (or the store's) Status: its message
// is shown as it is, as the reason of a refusal.
export class ApiError extends Error {
  constructor(code, message, reason) {
    super(message);
    this.code = code;
    this.reason = reason;
  }
}

async function answer(resp) {
  const text = await resp.text();
  let body = null;
  try { body = JSON.parse(text); } catch (e) { body = null; }
  if (!resp.ok) {
    const msg = body && body.message ? body.message : (text || resp.statusText);
    throw new ApiError(resp.status, msg, body && body.reason);
  }
  if (body === null) throw new ApiError(resp.status, 'the answer is not JSON');
  return { body, warning: resp.headers.get('Warning') };
}

// get reads ../<resource>?q=<request>&<params>.
export async function get(resource, request, params) {
  const u = new URLSearchParams();
  u.set('q', base64url(encodeRequest(request)));
  for (const [k, v] of params || []) u.append(k, v);
  const resp = await fetch('../' + resource + '?' + u.toString(), {
    headers: { Accept: jsonType },
    credentials: 'same-origin',
    cache: 'no-store',
  });
  return (await answer(resp)).body;
}

// restore posts a Restore; dryRun checks it (kube-apiserver's dry run as
// the caller included) and writes nothing. Every state-changing request
// carries X-Quanty-UI: 1, which kubectl quanty ui's proxy and the store
// require of a browser.
export async function restore(request, dryRun) {
  const resp = await fetch('../restores' + (dryRun ? '?dryRun=All' : ''), {
    method: 'POST',
    headers: {
      Accept: jsonType,
      'Content-Type': 'application/vnd.google.protobuf',
      'X-Quanty-UI': '1',
    },
    credentials: 'same-origin',
    cache: 'no-store',
    body: encodeRequest(request),
  });
  return answer(resp);
}

// The storage key space of kube-apiserver's objects (--etcd-prefix).
export const prefix = '/registry/';
export const prefixEnd = '/registry0';
