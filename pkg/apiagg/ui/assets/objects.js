// What the page knows of Kubernetes objects: their names, the manager of
// a change, the fields a change touched, and Secrets' values masked.

// Fields no one set by hand: left out of diffs and blame.
const ignored = new Set(['metadata.resourceVersion', 'metadata.generation']);

// flatten is an object's leaves by path (status.conditions[1].reason),
// managedFields left out (they are shown as managers).
export function flatten(obj) {
  const out = new Map();
  const walk = (v, p) => {
    if (p === 'metadata.managedFields' || ignored.has(p)) return;
    if (Array.isArray(v)) {
      if (v.length === 0) out.set(p, '[]');
      v.forEach((x, i) => walk(x, p + '[' + i + ']'));
    } else if (v !== null && typeof v === 'object') {
      const keys = Object.keys(v).sort();
      if (keys.length === 0 && p) out.set(p, '{}');
      for (const k of keys) {
        const name = /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? k : JSON.stringify(k);
        walk(v[k], p ? (name.startsWith('"') ? p + '[' + name + ']' : p + '.' + name) : name);
      }
    } else {
      out.set(p, typeof v === 'string' ? v : JSON.stringify(v));
    }
  };
  if (obj) walk(obj, '');
  return out;
}

export function isSecret(obj) {
  return !!obj && obj.kind === 'Secret' && (obj.apiVersion === 'v1' || obj.apiVersion === undefined);
}

// secretPath is whether a path holds a Secret's value (data, stringData,
// and kubectl apply's copy of them in its annotation).
export function secretPath(p) {
  return p.startsWith('data.') || p.startsWith('data[') || p.startsWith('stringData.') || p.startsWith('stringData[') ||
    p.includes('kubectl.kubernetes.io/last-applied-configuration');
}

// changedFields are the paths whose values differ between two states.
export function changedFields(before, after) {
  const a = flatten(before), b = flatten(after);
  const out = [];
  for (const [p, v] of b) if (a.get(p) !== v) out.push(p);
  for (const p of a.keys()) if (!b.has(p)) out.push(p);
  return out.sort();
}

// manager is the field manager that made the change to after: the
// managedFields entry with the newest time (the one written with it).
export function manager(after) {
  const mf = after && after.metadata && after.metadata.managedFields;
  if (!Array.isArray(mf) || mf.length === 0) return '';
  let best = null;
  for (const e of mf) {
    if (!best || (e.time || '') > (best.time || '')) best = e;
  }
  return best && best.manager ? best.manager + (best.subresource ? ' (' + best.subresource + ')' : '') : '';
}

// action of a log entry: created, updated or deleted.
export function action(e) {
  if (e.deleted) return 'deleted';
  if (!e.prevKv) return 'created';
  return 'updated';
}

// label names a key's object: kind/name, and its namespace, from the
// object itself where it decodes, else from the key.
export function label(kv) {
  const o = kv && kv.object;
  const key = kv ? kv.key : '';
  const parts = key.replace(/^\/registry\//, '').split('/');
  if (o && o.metadata) {
    const g = (o.apiVersion || '').includes('/') ? '.' + o.apiVersion.split('/')[0] : '';
    return { kind: (o.kind || parts[0]).toLowerCase() + g, name: o.metadata.name || parts[parts.length - 1], namespace: o.metadata.namespace || '' };
  }
  return { kind: parts.slice(0, -1).join('/'), name: parts[parts.length - 1], namespace: '' };
}

// stateOf is the object an entry leaves (none for a delete) and the one it
// replaced.
export function stateOf(e) {
  return { after: e.kv && !e.deleted ? e.kv.object : null, before: e.prevKv ? e.prevKv.object : null };
}
