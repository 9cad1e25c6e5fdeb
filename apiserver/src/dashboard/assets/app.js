// Capstan dashboard: a static page that reads the cluster through the ordinary Kubernetes API
// with the user's bearer token (Authorization header; never a cookie, never in a URL the
// server sees). Views are live: each list is fetched once, then followed with a watch from
// its resourceVersion (re-listed on 410 Gone); every event updates one row of a virtualised
// table, never the whole view.
'use strict';

const TOKEN_KEY = 'capstan.dashboard.token';
const NS_KEY = 'capstan.dashboard.ns';
const ROW_H = 28;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  ns: sessionStorage.getItem(NS_KEY) || '',
  informers: new Map(),
  cleanup: [],
  timers: [],
};

// ---------------------------------------------------------------- DOM helpers

function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v == null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : v);
    }
  }
  for (const c of kids.flat()) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

const $ = (sel) => document.querySelector(sel);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function age(ts) {
  if (!ts) return '';
  let s = Math.max(0, Math.floor((Date.now() - Date.parse(ts)) / 1000));
  if (s < 120) return s + 's';
  const m = Math.floor(s / 60);
  if (m < 120) return m + 'm';
  const hr = Math.floor(m / 60);
  if (hr < 48) return hr + 'h';
  return Math.floor(hr / 24) + 'd';
}

// ---------------------------------------------------------------- API access

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || 'HTTP ' + status);
    this.status = status;
    this.body = body;
  }
}

function authHeaders(extra) {
  return Object.assign({ Accept: 'application/json', Authorization: 'Bearer ' + state.token }, extra || {});
}

async function api(path, opts) {
  opts = opts || {};
  const res = await fetch(path, {
    method: opts.method || 'GET',
    body: opts.body,
    headers: authHeaders(opts.headers),
    credentials: 'omit',
    cache: 'no-store',
    signal: opts.signal,
  });
  if (res.status === 401) onUnauthorized();
  if (!res.ok) {
    let body = null;
    try { body = await res.json(); } catch (_) { /* not a Status */ }
    throw new ApiError(res.status, body);
  }
  return opts.text ? res.text() : res.json();
}

// An informer: list, then watch from the list's resourceVersion; re-list on 410 Gone.
// Items are kept by uid; listeners get ('RESET') after a list and (type, object) per event.
class Informer {
  constructor(path) {
    this.path = path;
    this.items = new Map();
    this.listeners = new Set();
    this.rv = '';
    this.synced = false;
    this.error = null;
    this.stopped = false;
    this.ctrl = null;
    this.loop();
  }

  subscribe(fn) {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  emit(type, obj) {
    for (const fn of this.listeners) {
      try { fn(type, obj); } catch (e) { console.error(e); }
    }
  }

  stop() {
    this.stopped = true;
    if (this.ctrl) this.ctrl.abort();
  }

  url(extra) {
    return this.path + (this.path.includes('?') ? '&' : '?') + extra;
  }

  async loop() {
    let failures = 0;
    while (!this.stopped) {
      try {
        if (!this.synced) await this.list();
        await this.watch();
        failures = 0;
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof ApiError && e.status === 410) { this.synced = false; continue; }
        this.error = e;
        this.synced = false;
        this.emit('ERROR', e);
        failures++;
        await sleep(Math.min(15000, 500 * 2 ** Math.min(failures, 5)));
      }
    }
  }

  async list() {
    this.ctrl = new AbortController();
    const list = await api(this.path, { signal: this.ctrl.signal });
    this.items = new Map();
    for (const o of list.items || []) this.items.set(o.metadata.uid, o);
    this.rv = (list.metadata && list.metadata.resourceVersion) || '';
    // List items carry no kind; the list's own tells it.
    this.apiVersion = list.apiVersion || '';
    this.kind = (list.kind || '').replace(/List$/, '');
    this.synced = true;
    this.error = null;
    this.emit('RESET', null);
  }

  async watch() {
    this.ctrl = new AbortController();
    const res = await fetch(this.url('watch=1&allowWatchBookmarks=true&resourceVersion=' + encodeURIComponent(this.rv)), {
      headers: authHeaders(),
      credentials: 'omit',
      cache: 'no-store',
      signal: this.ctrl.signal,
    });
    if (res.status === 401) onUnauthorized();
    if (!res.ok) {
      let body = null;
      try { body = await res.json(); } catch (_) { /* not a Status */ }
      throw new ApiError(res.status, body);
    }
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line.trim()) this.onEvent(JSON.parse(line));
        }
      }
    } finally {
      this.ctrl.abort();
    }
  }

  onEvent(ev) {
    const o = ev.object;
    if (ev.type === 'ERROR') throw new ApiError((o && o.code) || 500, o);
    if (o && o.metadata && o.metadata.resourceVersion) this.rv = o.metadata.resourceVersion;
    if (ev.type === 'BOOKMARK') return;
    if (ev.type === 'DELETED') this.items.delete(o.metadata.uid);
    else this.items.set(o.metadata.uid, o);
    this.emit(ev.type, o);
  }
}

// The shared informer for a collection path (views reuse each other's).
function informer(path) {
  let inf = state.informers.get(path);
  if (!inf) {
    inf = new Informer(path);
    state.informers.set(path, inf);
  }
  return inf;
}

function stopInformers() {
  for (const inf of state.informers.values()) inf.stop();
  state.informers.clear();
}

// A collection path in the selected namespace (or across all of them).
function collection(prefix, resource, namespaced) {
  if (namespaced === false || !state.ns) return prefix + '/' + resource;
  return prefix + '/namespaces/' + encodeURIComponent(state.ns) + '/' + resource;
}

// ---------------------------------------------------------------- virtualised table

// A table that renders only the rows in view. Rows are kept sorted by key (namespace/name);
// an event replaces one row's node when it is visible, and otherwise only schedules a
// re-render of the visible window (coalesced per animation frame).
class VTable {
  constructor(opts) {
    this.columns = opts.columns;
    this.onClick = opts.onClick;
    this.match = opts.match || (() => true);
    this.rows = [];
    this.visible = new Map();
    this.filter = '';
    this.pending = false;
    this.template = this.columns.map((c) => c.width || 'minmax(80px, 1fr)').join(' ');
    this.count = h('span', { class: 'muted' });
    this.message = h('span', { class: 'error' });
    const filter = h('input', { type: 'search', placeholder: 'filter by name', class: 'filter' });
    filter.addEventListener('input', () => { this.filter = filter.value.trim(); this.reset(this.source); });
    this.spacer = h('div', { class: 'spacer' });
    this.viewport = h('div', { class: 'viewport' }, this.spacer);
    this.viewport.addEventListener('scroll', () => this.schedule());
    const head = h('div', { class: 'thead' }, this.columns.map((c) => h('div', null, c.title)));
    head.style.gridTemplateColumns = this.template;
    this.el = h('div', { class: 'vtable', 'data-table': opts.name || '' },
      h('div', { class: 'tools' }, opts.title ? h('strong', null, opts.title) : null, filter, this.count, this.message),
      head, this.viewport);
    this.source = new Map();
  }

  static key(o) {
    return (o.metadata.namespace || '') + '/' + o.metadata.name;
  }

  accepts(o) {
    return this.match(o) && (!this.filter || o.metadata.name.includes(this.filter));
  }

  // Follows an informer: a RESET rebuilds, an event updates one row.
  bind(inf) {
    this.reset(inf.items);
    if (inf.error) this.setError(inf.error);
    return inf.subscribe((type, o) => {
      if (type === 'RESET') { this.setError(null); this.reset(inf.items); }
      else if (type === 'ERROR') this.setError(o);
      else this.update(type, o);
    });
  }

  setError(e) {
    this.message.textContent = e ? describeError(e) : '';
    this.el.classList.toggle('failed', !!e);
  }

  reset(items) {
    this.source = items;
    this.rows = [];
    for (const o of items.values()) if (this.accepts(o)) this.rows.push(o);
    this.rows.sort((a, b) => (VTable.key(a) < VTable.key(b) ? -1 : VTable.key(a) > VTable.key(b) ? 1 : 0));
    this.schedule();
  }

  indexOf(k) {
    let lo = 0, hi = this.rows.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (VTable.key(this.rows[mid]) < k) lo = mid + 1; else hi = mid;
    }
    return lo;
  }

  update(type, o) {
    const k = VTable.key(o);
    const i = this.indexOf(k);
    const present = i < this.rows.length && VTable.key(this.rows[i]) === k;
    if (type === 'DELETED' || !this.accepts(o)) {
      if (present) { this.rows.splice(i, 1); this.schedule(); }
      return;
    }
    if (present) {
      this.rows[i] = o;
      const node = this.visible.get(k);
      if (node) {
        const fresh = this.renderRow(o, i);
        node.replaceWith(fresh);
        this.visible.set(k, fresh);
      }
    } else {
      this.rows.splice(i, 0, o);
      this.schedule();
    }
  }

  // Re-renders one row by key (a derived value changed, e.g. a node's requests).
  refresh(k) {
    const node = this.visible.get(k);
    if (!node) return;
    const i = this.indexOf(k);
    if (i < this.rows.length && VTable.key(this.rows[i]) === k) {
      const fresh = this.renderRow(this.rows[i], i);
      node.replaceWith(fresh);
      this.visible.set(k, fresh);
    }
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  renderRow(o, i) {
    const row = h('div', { class: 'tr' + (this.onClick ? ' clickable' : ''), 'data-key': VTable.key(o), 'data-name': o.metadata.name },
      this.columns.map((c) => {
        const v = c.get(o);
        return h('div', { title: typeof v === 'string' ? v : null }, v);
      }));
    row.style.gridTemplateColumns = this.template;
    row.style.top = i * ROW_H + 'px';
    if (this.onClick) row.addEventListener('click', () => this.onClick(o));
    return row;
  }

  render() {
    const n = this.rows.length;
    this.count.textContent = n + (n === 1 ? ' item' : ' items');
    this.spacer.style.height = Math.max(n * ROW_H, 1) + 'px';
    const height = this.viewport.clientHeight || 600;
    const first = Math.max(0, Math.floor(this.viewport.scrollTop / ROW_H) - 5);
    const last = Math.min(n, first + Math.ceil(height / ROW_H) + 10);
    const next = new Map();
    const frag = document.createDocumentFragment();
    for (let i = first; i < last; i++) {
      const row = this.renderRow(this.rows[i], i);
      next.set(VTable.key(this.rows[i]), row);
      frag.append(row);
    }
    this.spacer.replaceChildren(frag);
    if (n === 0) this.spacer.append(h('div', { class: 'empty' }, this.source.size ? 'No matches' : 'None'));
    this.visible = next;
  }
}

function describeError(e) {
  if (e instanceof ApiError) {
    if (e.status === 403) return 'Forbidden: ' + e.message;
    return e.status + ': ' + e.message;
  }
  return String(e.message || e);
}

// ---------------------------------------------------------------- small widgets

function bar(used, total, label) {
  const frac = total > 0 ? Math.min(1, used / total) : 0;
  const el = h('div', { class: 'bar' + (frac >= 1 ? ' full' : frac > 0.8 ? ' high' : ''), title: label }, h('span'), h('em', null, label));
  el.firstChild.style.width = (frac * 100).toFixed(1) + '%';
  return el;
}

function statusSpan(text, kind) {
  return h('span', { class: 'status-' + kind }, text);
}

function sparkline(values, width, height) {
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('width', width);
  svg.setAttribute('height', height);
  const max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => ((i / Math.max(1, values.length - 1)) * (width - 2) + 1).toFixed(1) + ',' + (height - 1 - (v / max) * (height - 2)).toFixed(1));
  const line = document.createElementNS(ns, 'polyline');
  line.setAttribute('points', pts.join(' '));
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', '#2f6fde');
  line.setAttribute('stroke-width', '1.5');
  svg.append(line);
  return h('span', { class: 'spark' }, svg);
}

// Kubernetes quantities → numbers (CPU in cores, memory in bytes).
function quantity(q) {
  if (q == null) return 0;
  const m = /^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$/.exec(String(q).trim());
  if (!m) return 0;
  const mult = { '': 1, n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
    Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4, Pi: 1024 ** 5, Ei: 1024 ** 6 }[m[2]];
  return parseFloat(m[1]) * (mult == null ? 1 : mult);
}

function fmtBytes(b) {
  const units = ['B', 'Ki', 'Mi', 'Gi', 'Ti'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (b >= 10 || i === 0 ? Math.round(b) : b.toFixed(1)) + units[i];
}

function fmtCpu(c) {
  return c < 1 ? Math.round(c * 1000) + 'm' : (Math.round(c * 100) / 100).toString();
}

// ---------------------------------------------------------------- YAML (read-only view)

function yamlScalar(v) {
  if (v === null) return 'null';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  const s = String(v);
  if (s === '' || /^[\s]|[\s]$|[:#\n"'{}[\],&*!|>%@`]|^[-?]/.test(s) ||
      /^(true|false|null|yes|no|on|off|~|[-+]?[0-9.]+([eE][-+]?[0-9]+)?)$/i.test(s)) return JSON.stringify(s);
  return s;
}

function toYaml(v, indent) {
  indent = indent || '';
  if (Array.isArray(v)) {
    if (!v.length) return '[]';
    return v.map((item) => {
      if (item && typeof item === 'object' && !Array.isArray(item) && Object.keys(item).length) {
        const body = toYaml(item, indent + '  ');
        return indent + '- ' + body.slice(indent.length + 2);
      }
      return indent + '- ' + (item && typeof item === 'object' ? toYaml(item, indent + '  ').trimStart() : yamlScalar(item));
    }).join('\n');
  }
  if (v && typeof v === 'object') {
    const keys = Object.keys(v);
    if (!keys.length) return '{}';
    return keys.map((k) => {
      const val = v[k];
      const key = indent + yamlScalar(k) + ':';
      if (val && typeof val === 'object' && (Array.isArray(val) ? val.length : Object.keys(val).length)) {
        return key + '\n' + toYaml(val, Array.isArray(val) ? indent : indent + '  ');
      }
      return key + ' ' + (val && typeof val === 'object' ? toYaml(val) : yamlScalar(val));
    }).join('\n');
  }
  return indent + yamlScalar(v);
}

// ---------------------------------------------------------------- resources

const API = {
  nodes: ['/api/v1', 'nodes', false],
  namespaces: ['/api/v1', 'namespaces', false],
  pods: ['/api/v1', 'pods'],
  events: ['/api/v1', 'events'],
  services: ['/api/v1', 'services'],
  endpointslices: ['/apis/discovery.k8s.io/v1', 'endpointslices'],
  deployments: ['/apis/apps/v1', 'deployments'],
  replicasets: ['/apis/apps/v1', 'replicasets'],
  statefulsets: ['/apis/apps/v1', 'statefulsets'],
  daemonsets: ['/apis/apps/v1', 'daemonsets'],
  jobs: ['/apis/batch/v1', 'jobs'],
  cronjobs: ['/apis/batch/v1', 'cronjobs'],
  crds: ['/apis/apiextensions.k8s.io/v1', 'customresourcedefinitions', false],
};

function inf(name) {
  const [prefix, resource, namespaced] = API[name];
  return informer(collection(prefix, resource, namespaced));
}

// The API path of one object, from the collection it was listed in.
function objectPath(name, o) {
  const [prefix, resource, namespaced] = API[name];
  return objectPathOf(prefix, resource, namespaced !== false, o);
}

function objectPathOf(prefix, resource, namespaced, o) {
  const ns = namespaced && o.metadata.namespace ? '/namespaces/' + encodeURIComponent(o.metadata.namespace) : '';
  return prefix + ns + '/' + resource + '/' + encodeURIComponent(o.metadata.name);
}

function openObject(path) {
  location.hash = '#/object' + path;
}

function podPhase(p) {
  if (p.metadata.deletionTimestamp) return ['Terminating', 'warn'];
  const cs = (p.status && p.status.containerStatuses) || [];
  for (const c of cs) {
    const w = c.state && c.state.waiting;
    if (w && w.reason) return [w.reason, /Err|BackOff|Invalid/.test(w.reason) ? 'bad' : 'warn'];
  }
  const phase = (p.status && p.status.phase) || 'Pending';
  return [phase, phase === 'Running' || phase === 'Succeeded' ? 'ok' : phase === 'Failed' ? 'bad' : 'warn'];
}

function podReady(p) {
  const cs = (p.status && p.status.containerStatuses) || [];
  const total = ((p.spec && p.spec.containers) || []).length;
  return cs.filter((c) => c.ready).length + '/' + total;
}

function podRestarts(p) {
  return ((p.status && p.status.containerStatuses) || []).reduce((n, c) => n + (c.restartCount || 0), 0);
}

// A pod's requests (the larger of the app containers' sum and any init container).
function podRequests(p) {
  const sum = { cpu: 0, memory: 0 };
  for (const c of (p.spec && p.spec.containers) || []) {
    const r = (c.resources && c.resources.requests) || {};
    sum.cpu += quantity(r.cpu);
    sum.memory += quantity(r.memory);
  }
  for (const c of (p.spec && p.spec.initContainers) || []) {
    const r = (c.resources && c.resources.requests) || {};
    sum.cpu = Math.max(sum.cpu, quantity(r.cpu));
    sum.memory = Math.max(sum.memory, quantity(r.memory));
  }
  return sum;
}

const nameCol = { title: 'Name', get: (o) => o.metadata.name, width: 'minmax(160px, 2fr)' };
const nsCol = { title: 'Namespace', get: (o) => o.metadata.namespace || '', width: 'minmax(100px, 1fr)' };
const ageCol = { title: 'Age', get: (o) => age(o.metadata.creationTimestamp), width: '60px' };

// ---------------------------------------------------------------- views

function section(title, ...kids) {
  return h('section', null, h('h2', null, title), ...kids);
}

function track(unsubscribe) {
  state.cleanup.push(unsubscribe);
}

function table(name, columns, opts) {
  const t = new VTable(Object.assign({ columns, name }, opts || {}));
  track(t.bind(inf(name)));
  return t;
}

function viewOverview(root) {
  const nodesInf = inf('nodes');
  const podsInf = inf('pods');
  // Requests per node, kept incrementally: each pod's contribution is remembered so an event
  // adjusts its node's totals by the difference and re-renders only that node's row.
  const perNode = new Map();
  const contrib = new Map();
  const phases = new Map();
  const nodeKey = (name) => '/' + name;
  const nodesTable = new VTable({
    name: 'nodes',
    title: 'Nodes',
    columns: [
      nameCol,
      { title: 'Status', width: '90px', get: (n) => {
        const ready = ((n.status && n.status.conditions) || []).find((c) => c.type === 'Ready');
        const ok = ready && ready.status === 'True';
        return statusSpan(ok ? (n.spec && n.spec.unschedulable ? 'Ready,NoSched' : 'Ready') : 'NotReady', ok ? 'ok' : 'bad');
      } },
      { title: 'CPU requested', width: 'minmax(140px, 2fr)', get: (n) => {
        const u = perNode.get(n.metadata.name) || { cpu: 0 };
        const a = quantity(n.status && n.status.allocatable && n.status.allocatable.cpu);
        return bar(u.cpu, a, fmtCpu(u.cpu) + ' / ' + fmtCpu(a));
      } },
      { title: 'Memory requested', width: 'minmax(140px, 2fr)', get: (n) => {
        const u = perNode.get(n.metadata.name) || { memory: 0 };
        const a = quantity(n.status && n.status.allocatable && n.status.allocatable.memory);
        return bar(u.memory, a, fmtBytes(u.memory) + ' / ' + fmtBytes(a));
      } },
      { title: 'Pods', width: 'minmax(120px, 1.5fr)', get: (n) => {
        const u = perNode.get(n.metadata.name) || { pods: 0 };
        const a = quantity(n.status && n.status.allocatable && n.status.allocatable.pods);
        return bar(u.pods, a, u.pods + ' / ' + a);
      } },
      ageCol,
    ],
  });
  track(nodesTable.bind(nodesInf));

  const phaseBar = h('div', { class: 'phases' });
  const legend = h('div', { class: 'legend' });
  const podCount = h('div', { class: 'big' }, '0');
  const nodeCount = h('div', { class: 'big' }, '0');
  let phaseDirty = false;
  function drawPhases() {
    phaseDirty = false;
    let total = 0;
    for (const v of phases.values()) total += v;
    podCount.textContent = total;
    nodeCount.textContent = nodesInf.items.size;
    phaseBar.replaceChildren();
    legend.replaceChildren();
    for (const ph of ['Running', 'Pending', 'Succeeded', 'Failed', 'Unknown']) {
      const n = phases.get(ph) || 0;
      const seg = h('span', { class: 'ph-' + ph, title: ph + ': ' + n });
      seg.style.width = total ? (n / total) * 100 + '%' : '0';
      phaseBar.append(seg);
      legend.append(h('span', { 'data-phase': ph }, h('i', { class: 'ph-' + ph }), ph + ' ' + n));
    }
  }
  const schedulePhases = () => {
    if (!phaseDirty) { phaseDirty = true; requestAnimationFrame(drawPhases); }
  };
  function account(uid, p) {
    const old = contrib.get(uid);
    if (old) {
      const t = perNode.get(old.node);
      if (t) { t.cpu -= old.cpu; t.memory -= old.memory; t.pods -= 1; }
      phases.set(old.phase, (phases.get(old.phase) || 0) - 1);
      contrib.delete(uid);
    }
    if (p) {
      const phase = (p.status && p.status.phase) || 'Pending';
      const node = p.spec && p.spec.nodeName;
      const c = { node: '', cpu: 0, memory: 0, phase };
      if (node && phase !== 'Succeeded' && phase !== 'Failed') {
        const r = podRequests(p);
        c.node = node; c.cpu = r.cpu; c.memory = r.memory;
        const t = perNode.get(node) || { cpu: 0, memory: 0, pods: 0 };
        t.cpu += r.cpu; t.memory += r.memory; t.pods += 1;
        perNode.set(node, t);
      }
      phases.set(phase, (phases.get(phase) || 0) + 1);
      contrib.set(uid, c);
    }
    const touched = new Set([old && old.node, contrib.get(uid) && contrib.get(uid).node]);
    for (const n of touched) if (n) nodesTable.refresh(nodeKey(n));
    schedulePhases();
  }
  function resetPods() {
    perNode.clear(); contrib.clear(); phases.clear();
    for (const [uid, p] of podsInf.items) account(uid, p);
    nodesTable.render();
  }
  resetPods();
  const podErr = h('div');
  track(podsInf.subscribe((type, p) => {
    if (type === 'RESET') { podErr.replaceChildren(); resetPods(); }
    else if (type === 'ERROR') podErr.replaceChildren(h('div', { class: 'banner' }, 'Pods: ' + describeError(p)));
    else account(p.metadata.uid, type === 'DELETED' ? null : p);
  }));
  track(nodesInf.subscribe(() => schedulePhases()));
  drawPhases();

  const warnings = table('events', [
    { title: 'Last seen', width: '70px', get: (e) => age(e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp) },
    nsCol,
    { title: 'Object', width: 'minmax(140px, 1.5fr)', get: (e) => (e.involvedObject ? e.involvedObject.kind + '/' + e.involvedObject.name : '') },
    { title: 'Reason', width: '130px', get: (e) => e.reason || '' },
    { title: 'Message', width: 'minmax(200px, 4fr)', get: (e) => e.message || '' },
  ], { title: 'Warning events', match: (e) => e.type === 'Warning' });

  const metrics = h('div', { class: 'cards' });
  root.append(
    h('div', { class: 'cards' },
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Nodes'), nodeCount),
      h('div', { class: 'card', 'data-card': 'pods' }, h('div', { class: 'label' }, 'Pods'), podCount, phaseBar, legend)),
    podErr,
    section('Nodes: requested vs allocatable', nodesTable.el),
    section('Warning events and scheduling decisions', warnings.el),
    section('API server and store', metrics));
  startMetrics(metrics);
}

// /metrics, when the user may read it (nonResourceURLs get): request rate and latency
// sparklines and the store's figures (the embedded member's capstan_store_* gauges: the
// store's own metrics port is out of the page's reach). Metrics have no watch; they are
// scraped every 5 s while the overview is open.
function startMetrics(box) {
  const history = [];
  let stopped = false;
  state.cleanup.push(() => { stopped = true; });
  async function scrape() {
    let text;
    try {
      text = await api('/metrics', { text: true, headers: { Accept: 'text/plain' } });
    } catch (e) {
      box.replaceChildren(h('span', { class: 'muted' }, 'Metrics not readable with this identity (' + describeError(e) + ').'));
      return false;
    }
    const sums = new Map();
    const fsync = []; // [le, cumulative count] of the WAL fsync histogram
    for (const line of text.split('\n')) {
      if (!line || line[0] === '#') continue;
      const sp = line.lastIndexOf(' ');
      const series = line.slice(0, sp);
      const name = series.replace(/\{.*$/, '');
      const v = parseFloat(line.slice(sp + 1));
      if (!Number.isFinite(v)) continue;
      if (name === 'capstan_store_wal_fsync_duration_seconds_bucket') {
        const le = /le="([^"]*)"/.exec(series);
        if (le) fsync.push([le[1] === '+Inf' ? Infinity : parseFloat(le[1]), v]);
        continue;
      }
      // Watches (and exec-style connections) last as long as they are open: not latency.
      if (name.startsWith('apiserver_request_duration') && /verb="(WATCH|CONNECT)"/.test(series)) continue;
      if (name === 'apiserver_request_duration_seconds_sum' || name === 'apiserver_request_duration_seconds_count' ||
          name === 'apiserver_request_total' || name.startsWith('capstan_store_') || name.startsWith('apiserver_storage_') ||
          name === 'process_resident_memory_bytes') {
        sums.set(name, (sums.get(name) || 0) + v);
      }
    }
    history.push({ t: Date.now(), sums });
    if (history.length > 60) history.shift();
    const rates = [], lat = [];
    for (let i = 1; i < history.length; i++) {
      const a = history[i - 1], b = history[i];
      const dt = (b.t - a.t) / 1000;
      const dn = (b.sums.get('apiserver_request_total') || 0) - (a.sums.get('apiserver_request_total') || 0);
      const dc = (b.sums.get('apiserver_request_duration_seconds_count') || 0) - (a.sums.get('apiserver_request_duration_seconds_count') || 0);
      const ds = (b.sums.get('apiserver_request_duration_seconds_sum') || 0) - (a.sums.get('apiserver_request_duration_seconds_sum') || 0);
      rates.push(Math.max(0, dn / dt));
      lat.push(dc > 0 ? (ds / dc) * 1000 : 0);
    }
    const card = (label, value, spark, id) => h('div', { class: 'card', 'data-card': id || null }, h('div', { class: 'label' }, label), h('div', { class: 'big' }, value), spark || null);
    const cards = [
      card('Requests/s', rates.length ? rates[rates.length - 1].toFixed(1) : '…', rates.length > 1 ? sparkline(rates, 160, 30) : null),
      card('Mean latency', lat.length ? lat[lat.length - 1].toFixed(1) + ' ms' : '…', lat.length > 1 ? sparkline(lat, 160, 30) : null),
    ];
    const last = history[history.length - 1].sums;
    const extra = [
      ['capstan_store_is_leader', 'Store leader (this member)', (v) => (v ? 'yes' : last.get('capstan_store_has_leader') ? 'no' : 'none'), 'store-leader'],
      ['capstan_store_raft_term', 'Raft term', (v) => String(v), 'store-term'],
      ['capstan_store_raft_applied_index', 'Raft applied / commit', (v) => v + ' / ' + (last.get('capstan_store_raft_commit_index') ?? '?'), 'store-index'],
      ['capstan_store_members', 'Store members', (v) => String(v), 'store-members'],
      ['capstan_store_db_size_bytes', 'Store DB size', fmtBytes, 'store-db'],
      ['capstan_store_wal_fsync_duration_seconds_count', 'WAL fsync p99 / mean', () => fsyncLatency(fsync, last), 'store-fsync'],
      ['apiserver_storage_objects', 'Stored objects', (v) => String(v)],
      ['process_resident_memory_bytes', 'Resident memory', fmtBytes],
    ];
    for (const [name, label, fmt, id] of extra) {
      if (last.has(name)) cards.push(card(label, fmt(last.get(name)), null, id));
    }
    box.replaceChildren(...cards);
    return true;
  }
  (async () => {
    // The first rate after 1 s, then every 5 s.
    while (!stopped && (await scrape())) await sleep(history.length < 2 ? 1000 : 5000);
  })();
}

// The WAL fsync latency since the server started, from its histogram: the p99 as the upper
// bound of the bucket holding it, and the mean.
function fsyncLatency(buckets, sums) {
  const n = sums.get('capstan_store_wal_fsync_duration_seconds_count') || 0;
  if (!n) return 'no fsync yet';
  const ms = (s) => (s * 1000 < 10 ? (s * 1000).toFixed(2) : Math.round(s * 1000)) + ' ms';
  buckets.sort((a, b) => a[0] - b[0]);
  const b = buckets.find(([, c]) => c >= 0.99 * n);
  const p99 = !b ? '?' : b[0] === Infinity ? (buckets.length > 1 ? '> ' + ms(buckets[buckets.length - 2][0]) : '?') : '≤ ' + ms(b[0]);
  return p99 + ' / ' + ms((sums.get('capstan_store_wal_fsync_duration_seconds_sum') || 0) / n);
}

function viewNamespaces(root) {
  const t = table('namespaces', [
    nameCol,
    { title: 'Status', width: '120px', get: (n) => (n.status && n.status.phase) || '' },
    { title: 'Labels', width: 'minmax(200px, 3fr)', get: (n) => Object.entries(n.metadata.labels || {}).map(([k, v]) => k + '=' + v).join(', ') },
    ageCol,
  ], { onClick: (o) => openObject(objectPath('namespaces', o)) });
  root.append(t.el);
}

// Progress towards a goal (replicas ready, completions): full is good, not a warning.
function progress(ready, want) {
  const el = bar(ready, want, ready + ' / ' + want);
  el.className = 'bar prog' + (ready >= want ? ' done' : '');
  return el;
}

const WORKLOADS = {
  deployments: [
    { title: 'Ready', width: 'minmax(120px, 1.5fr)', get: (d) => progress((d.status && d.status.readyReplicas) || 0, (d.spec && d.spec.replicas) ?? 1) },
    { title: 'Up-to-date', width: '90px', get: (d) => String((d.status && d.status.updatedReplicas) || 0) },
    { title: 'Available', width: '80px', get: (d) => String((d.status && d.status.availableReplicas) || 0) },
    { title: 'Rollout', width: 'minmax(160px, 2fr)', get: (d) => {
      const c = ((d.status && d.status.conditions) || []).find((x) => x.type === 'Progressing');
      const done = d.status && d.status.observedGeneration >= d.metadata.generation &&
        (d.status.updatedReplicas || 0) === ((d.spec && d.spec.replicas) ?? 1) && (d.status.availableReplicas || 0) === ((d.spec && d.spec.replicas) ?? 1);
      return statusSpan(done ? 'complete' : (c && c.reason) || 'progressing', done ? 'ok' : 'warn');
    } },
  ],
  replicasets: [
    { title: 'Ready', width: 'minmax(120px, 1.5fr)', get: (r) => progress((r.status && r.status.readyReplicas) || 0, (r.spec && r.spec.replicas) ?? 1) },
    { title: 'Owner', width: 'minmax(140px, 1.5fr)', get: (r) => ((r.metadata.ownerReferences || [])[0] || {}).name || '' },
  ],
  statefulsets: [
    { title: 'Ready', width: 'minmax(120px, 1.5fr)', get: (s) => progress((s.status && s.status.readyReplicas) || 0, (s.spec && s.spec.replicas) ?? 1) },
    { title: 'Updated', width: '80px', get: (s) => String((s.status && s.status.updatedReplicas) || 0) },
  ],
  daemonsets: [
    { title: 'Ready', width: 'minmax(120px, 1.5fr)', get: (d) => progress((d.status && d.status.numberReady) || 0, (d.status && d.status.desiredNumberScheduled) || 0) },
    { title: 'Updated', width: '80px', get: (d) => String((d.status && d.status.updatedNumberScheduled) || 0) },
  ],
  jobs: [
    { title: 'Completions', width: 'minmax(120px, 1.5fr)', get: (j) => progress((j.status && j.status.succeeded) || 0, (j.spec && j.spec.completions) ?? 1) },
    { title: 'Active', width: '60px', get: (j) => String((j.status && j.status.active) || 0) },
    { title: 'Failed', width: '60px', get: (j) => String((j.status && j.status.failed) || 0) },
  ],
  cronjobs: [
    { title: 'Schedule', width: '120px', get: (c) => (c.spec && c.spec.schedule) || '' },
    { title: 'Suspend', width: '70px', get: (c) => String(!!(c.spec && c.spec.suspend)) },
    { title: 'Active', width: '60px', get: (c) => String(((c.status && c.status.active) || []).length) },
    { title: 'Last schedule', width: '100px', get: (c) => age(c.status && c.status.lastScheduleTime) },
  ],
};

function viewWorkloads(root, arg) {
  const kind = WORKLOADS[arg] ? arg : 'deployments';
  root.append(h('div', { class: 'tabs' }, Object.keys(WORKLOADS).map((k) =>
    h('a', { href: '#/workloads/' + k, class: k === kind ? 'active' : null }, k))));
  const t = table(kind, [nsCol, nameCol, ...WORKLOADS[kind], ageCol], { onClick: (o) => openObject(objectPath(kind, o)) });
  root.append(t.el);
}

function viewPods(root) {
  const t = table('pods', [
    nsCol,
    nameCol,
    { title: 'Ready', width: '60px', get: podReady },
    { title: 'Status', width: '130px', get: (p) => { const [s, k] = podPhase(p); return statusSpan(s, k); } },
    { title: 'Restarts', width: '70px', get: (p) => String(podRestarts(p)) },
    { title: 'Node', width: 'minmax(100px, 1fr)', get: (p) => (p.spec && p.spec.nodeName) || '' },
    { title: 'IP', width: '110px', get: (p) => (p.status && p.status.podIP) || '' },
    ageCol,
  ], { onClick: (o) => openObject(objectPath('pods', o)) });
  root.append(t.el);
}

function viewServices(root) {
  const svc = table('services', [
    nsCol,
    nameCol,
    { title: 'Type', width: '100px', get: (s) => (s.spec && s.spec.type) || '' },
    { title: 'Cluster IP', width: '120px', get: (s) => (s.spec && s.spec.clusterIP) || '' },
    { title: 'Ports', width: 'minmax(120px, 1.5fr)', get: (s) => ((s.spec && s.spec.ports) || []).map((p) => p.port + '/' + (p.protocol || 'TCP')).join(', ') },
    ageCol,
  ], { title: 'Services', onClick: (o) => openObject(objectPath('services', o)) });
  const eps = table('endpointslices', [
    nsCol,
    nameCol,
    { title: 'Service', width: 'minmax(100px, 1fr)', get: (e) => (e.metadata.labels || {})['kubernetes.io/service-name'] || '' },
    { title: 'Ready endpoints', width: 'minmax(120px, 1.5fr)', get: (e) => {
      const all = e.endpoints || [];
      return progress(all.filter((x) => !x.conditions || x.conditions.ready !== false).length, all.length);
    } },
    { title: 'Addresses', width: 'minmax(160px, 2fr)', get: (e) => (e.endpoints || []).flatMap((x) => x.addresses || []).join(', ') },
  ], { title: 'EndpointSlices', onClick: (o) => openObject(objectPath('endpointslices', o)) });
  root.append(svc.el, h('div', { class: 'gap' }, ' '), eps.el);
}

function viewEvents(root) {
  const t = table('events', [
    { title: 'Last seen', width: '70px', get: (e) => age(e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp) },
    { title: 'Type', width: '70px', get: (e) => statusSpan(e.type || '', e.type === 'Warning' ? 'warn' : 'ok') },
    nsCol,
    { title: 'Object', width: 'minmax(140px, 1.5fr)', get: (e) => (e.involvedObject ? e.involvedObject.kind + '/' + e.involvedObject.name : '') },
    { title: 'Reason', width: '130px', get: (e) => e.reason || '' },
    { title: 'Source', width: '120px', get: (e) => (e.source && e.source.component) || e.reportingComponent || '' },
    { title: 'Message', width: 'minmax(200px, 4fr)', get: (e) => e.message || '' },
  ]);
  root.append(t.el);
}

// Custom resources: any CRD, with a table of its printer columns.
function viewCustom(root, arg) {
  const crds = inf('crds');
  const tabs = h('div', { class: 'tabs' });
  const body = h('div');
  root.append(tabs, body);
  let shown = null;
  function draw() {
    tabs.replaceChildren(...[...crds.items.values()]
      .sort((a, b) => (a.metadata.name < b.metadata.name ? -1 : 1))
      .map((c) => h('a', { href: '#/custom/' + c.metadata.name, class: c.metadata.name === arg ? 'active' : null }, c.spec.names.kind)));
    if (crds.error) body.replaceChildren(h('div', { class: 'banner' }, 'CustomResourceDefinitions: ' + describeError(crds.error)));
    const crd = [...crds.items.values()].find((c) => c.metadata.name === arg);
    if (!crd || shown === arg) return;
    shown = arg;
    const version = (crd.spec.versions || []).find((v) => v.storage) || (crd.spec.versions || [])[0];
    if (!version) return;
    const namespaced = crd.spec.scope === 'Namespaced';
    const prefix = '/apis/' + crd.spec.group + '/' + version.name;
    const cols = (version.additionalPrinterColumns || []).filter((c) => !c.priority).map((c) => ({
      title: c.name,
      get: (o) => {
        const v = jsonPath(o, c.jsonPath);
        if (v == null) return '';
        if (c.type === 'date') return age(v);
        return typeof v === 'object' ? JSON.stringify(v) : String(v);
      },
    }));
    const t = new VTable({ name: 'custom', columns: [...(namespaced ? [nsCol] : []), nameCol, ...cols, ageCol],
      onClick: (o) => openObject(objectPathOf(prefix, crd.spec.names.plural, namespaced, o)) });
    track(t.bind(informer(collection(prefix, crd.spec.names.plural, namespaced))));
    body.replaceChildren(t.el);
  }
  track(crds.subscribe(draw));
  draw();
  if (!arg) body.replaceChildren(h('p', { class: 'muted' }, 'Pick a resource type.'));
}

// The simple JSONPath of printer columns: .a.b, .a[0].b, .a['x.y'].
function jsonPath(o, path) {
  const parts = [];
  const re = /\.([^.[\]]+)|\[(\d+)\]|\['([^']+)'\]|\["([^"]+)"\]/g;
  let m;
  while ((m = re.exec(path))) parts.push(m[1] ?? (m[2] !== undefined ? Number(m[2]) : m[3] ?? m[4]));
  let v = o;
  for (const p of parts) {
    if (v == null) return null;
    v = v[p];
  }
  return v;
}

// A Deployment's rollout timeline: an inline SVG with one lane per ReplicaSet revision. Each
// lane starts at the ReplicaSet's creationTimestamp; its bars show spec.replicas (light) and
// status.readyReplicas (dark) as observed from the watch since the page opened.
function rolloutTimeline(rs, owner, revision) {
  const NS = 'http://www.w3.org/2000/svg';
  const svg = (tag, attrs, ...kids) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    for (const c of kids) e.append(c);
    return e;
  };
  const samples = new Map(); // uid -> [{ t, want, ready }]
  const el = h('div', { class: 'timeline', 'data-timeline': '' });
  const owned = (r) => { const d = owner(); return !!d && (r.metadata.ownerReferences || []).some((o) => o.uid === d.metadata.uid); };
  const observe = (r) => {
    const uid = r.metadata.uid;
    const s = { t: Date.now(), want: (r.spec && r.spec.replicas) ?? 0, ready: (r.status && r.status.readyReplicas) || 0 };
    const list = samples.get(uid) || [];
    const last = list[list.length - 1];
    if (!last || last.want !== s.want || last.ready !== s.ready) list.push(s);
    samples.set(uid, list);
  };
  const draw = () => {
    const sets = [...rs.items.values()].filter(owned);
    for (const r of sets) if (!samples.has(r.metadata.uid)) observe(r);
    const created = (r) => Date.parse(r.metadata.creationTimestamp) || Date.now();
    const now = Date.now();
    const start = Math.min(now - 20000, ...sets.map(created));
    const byRev = new Map();
    for (const r of sets) {
      const k = revision(r);
      byRev.set(k, [...(byRev.get(k) || []), r]);
    }
    const revs = [...byRev.keys()].sort((a, b) => a - b);
    const maxWant = Math.max(1, ...sets.flatMap((r) => (samples.get(r.metadata.uid) || []).map((s) => Math.max(s.want, s.ready))));
    const W = 560, L = 56, LANE = 26, H = revs.length * LANE + 18;
    const x = (t) => L + ((Math.max(t, start) - start) / Math.max(1, now - start)) * (W - L - 8);
    const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': 'Rollout timeline' });
    revs.forEach((rev, i) => {
      const y = i * LANE + 4;
      const lane = svg('g', { 'data-revision': rev, class: 'lane' });
      lane.append(svg('text', { x: 4, y: y + 15, class: 'label' }, 'rev ' + rev));
      lane.append(svg('line', { x1: L, x2: W - 8, y1: y + LANE - 4, y2: y + LANE - 4, class: 'axis' }));
      for (const r of byRev.get(rev)) {
        const list = samples.get(r.metadata.uid) || [];
        // Before the page opened only the creation time is known: the first observed values
        // stand for the span since then.
        const pts = list.map((s, j) => ({ ...s, t: j === 0 ? Math.min(s.t, created(r)) : s.t }));
        pts.forEach((s, j) => {
          const x0 = x(s.t), x1 = x(j + 1 < pts.length ? pts[j + 1].t : now);
          const bar = (v, cls) => {
            const hgt = (v / maxWant) * (LANE - 8);
            if (hgt > 0) lane.append(svg('rect', { x: x0, y: y + LANE - 4 - hgt, width: Math.max(1, x1 - x0), height: hgt, class: cls },
              svg('title', null, `${r.metadata.name}: ${s.ready} / ${s.want} ready`)));
          };
          bar(s.want, 'want');
          bar(s.ready, 'ready');
        });
      }
      g.append(lane);
    });
    g.append(svg('text', { x: L, y: H - 2, class: 'tick' }, new Date(start).toLocaleTimeString()));
    g.append(svg('text', { x: W - 8, y: H - 2, class: 'tick end' }, 'now'));
    el.replaceChildren(h('strong', null, 'Rollout timeline'), revs.length ? g : h('p', { class: 'muted' }, 'No ReplicaSets yet.'));
  };
  let pending = false;
  const schedule = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; draw(); });
  };
  const off = rs.subscribe((type, o) => {
    if (type !== 'RESET' && type !== 'ERROR' && o && o.metadata && owned(o)) observe(o);
    schedule();
  });
  // The time axis moves on even without events.
  const timer = setInterval(schedule, 5000);
  draw();
  return { el, redraw: schedule, stop: () => { off(); clearInterval(timer); } };
}

// One object: its YAML (kept current by a watch on its name), its events, and an editor
// that applies changes with server-side apply as the logged-in user.
function viewObject(root, path) {
  const m = /^(.*)\/([^/]+)$/.exec(path);
  if (!m) { root.append(h('div', { class: 'banner' }, 'Bad object path')); return; }
  const [, coll, name] = m;
  const pre = h('pre', { class: 'yaml', id: 'yaml' }, 'Loading…');
  const title = h('h1', null, decodeURIComponent(name));
  const err = h('div');
  const editBtn = h('button', { type: 'button', id: 'edit' }, 'Edit (server-side apply)');
  const editor = h('div');
  const right = h('div', null, editor);
  root.append(title, h('div', { class: 'muted' }, path), err, h('div', { class: 'split' }, h('div', null, pre, h('p', null, editBtn)), right));
  let current = null;
  const w = informer(coll + '?fieldSelector=' + encodeURIComponent('metadata.name=' + decodeURIComponent(name)));
  const draw = () => {
    current = [...w.items.values()][0] || null;
    if (w.error) err.replaceChildren(h('div', { class: 'banner' }, describeError(w.error)));
    else err.replaceChildren();
    if (current) {
      const shown = Object.assign({ apiVersion: w.apiVersion, kind: w.kind }, JSON.parse(JSON.stringify(current)));
      if (shown.metadata) delete shown.metadata.managedFields;
      pre.textContent = toYaml(shown);
    } else if (w.synced) pre.textContent = '(not found)';
  };
  track(w.subscribe(draw));
  draw();
  editBtn.addEventListener('click', () => {
    if (!current) return;
    const obj = Object.assign({ apiVersion: w.apiVersion, kind: w.kind }, JSON.parse(JSON.stringify(current)));
    delete obj.status;
    for (const f of ['managedFields', 'resourceVersion', 'uid', 'creationTimestamp', 'generation']) delete obj.metadata[f];
    const area = h('textarea', { class: 'edit', spellcheck: 'false' });
    area.value = JSON.stringify(obj, null, 2);
    const force = h('input', { type: 'checkbox', id: 'force' });
    const msg = h('div', { id: 'apply-result' });
    const apply = h('button', { type: 'button', class: 'primary', id: 'apply' }, 'Apply');
    apply.addEventListener('click', async () => {
      msg.replaceChildren('Applying…');
      try {
        JSON.parse(area.value);
        await api(path + '?fieldManager=capstan-dashboard' + (force.checked ? '&force=true' : ''), {
          method: 'PATCH', body: area.value, headers: { 'Content-Type': 'application/apply-patch+yaml' },
        });
        msg.replaceChildren(statusSpan('Applied.', 'ok'));
      } catch (e) {
        msg.replaceChildren(h('div', { class: 'banner' }, e instanceof ApiError && e.status === 409 ? 'Conflict: ' + e.message + ' (tick "force" to take over these fields)' : describeError(e)));
      }
    });
    editor.replaceChildren(h('h2', null, 'Edit (JSON; applied as you, field manager capstan-dashboard)'), area,
      h('p', null, apply, ' ', h('label', null, force, ' force conflicts')), msg);
  });
  // A Deployment's rollout history: its ReplicaSets by revision, with their readiness.
  if (/\/apis\/apps\/v1\/namespaces\/[^/]+\/deployments$/.test(coll)) {
    const rs = informer(coll.replace(/deployments$/, 'replicasets'));
    const revision = (r) => Number(((r.metadata.annotations || {})['deployment.kubernetes.io/revision']) || 0);
    const t = new VTable({
      name: 'rollout',
      title: 'Rollout history (ReplicaSets)',
      match: (r) => !!current && (r.metadata.ownerReferences || []).some((o) => o.uid === current.metadata.uid),
      columns: [
        { title: 'Revision', width: '70px', get: (r) => String(revision(r)) },
        nameCol,
        { title: 'Ready', width: 'minmax(120px, 1.5fr)', get: (r) => progress((r.status && r.status.readyReplicas) || 0, (r.spec && r.spec.replicas) ?? 0) },
        ageCol,
      ],
    });
    track(t.bind(rs));
    // The owner is known only once the Deployment is read.
    track(w.subscribe(() => t.reset(rs.items)));
    const tl = rolloutTimeline(rs, () => current, revision);
    track(tl.stop);
    track(w.subscribe(tl.redraw));
    right.append(tl.el, t.el);
  }
  // The object's events (when they may be read).
  if (/\/namespaces\//.test(coll)) {
    const ns = /\/namespaces\/([^/]+)\//.exec(coll)[1];
    const evs = informer('/api/v1/namespaces/' + ns + '/events');
    const t = new VTable({
      name: 'object-events',
      title: 'Events',
      match: (e) => e.involvedObject && e.involvedObject.name === decodeURIComponent(name),
      columns: [
        { title: 'Last seen', width: '70px', get: (e) => age(e.lastTimestamp || e.eventTime || e.metadata.creationTimestamp) },
        { title: 'Type', width: '70px', get: (e) => e.type || '' },
        { title: 'Reason', width: '120px', get: (e) => e.reason || '' },
        { title: 'Message', width: 'minmax(200px, 4fr)', get: (e) => e.message || '' },
      ],
    });
    track(t.bind(evs));
    right.append(t.el);
  }
}

// ---------------------------------------------------------------- shell: login, routing

const VIEWS = {
  overview: viewOverview,
  namespaces: viewNamespaces,
  workloads: viewWorkloads,
  pods: viewPods,
  services: viewServices,
  events: viewEvents,
  custom: viewCustom,
};

function clearView() {
  for (const f of state.cleanup) { try { f(); } catch (_) { /* already gone */ } }
  state.cleanup = [];
}

function route() {
  if (!state.token) return;
  clearView();
  const view = $('#view');
  view.replaceChildren();
  const hash = location.hash.replace(/^#\/?/, '');
  let name, arg;
  if (hash.startsWith('object/')) {
    name = 'object';
    arg = hash.slice('object'.length);
  } else {
    [name, arg] = hash.split('/');
  }
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.view === name);
  const root = h('div', { 'data-view': name || 'overview' });
  view.append(root);
  if (name === 'object') viewObject(root, arg);
  else (VIEWS[name] || viewOverview)(root, arg);
  // Informers no view uses any more are stopped.
  const used = new Set();
  for (const [path, i] of state.informers) if (i.listeners.size) used.add(path);
  for (const [path, i] of state.informers) if (!used.has(path)) { i.stop(); state.informers.delete(path); }
}

function onUnauthorized() {
  if (!state.token) return;
  logout('The token was refused (401). Log in again.');
}

function logout(message) {
  clearView();
  stopInformers();
  state.token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $('#view').replaceChildren();
  showLogin(message);
}

function showLogin(message) {
  $('#login').hidden = false;
  $('#nav').hidden = true;
  $('#ns-picker').hidden = true;
  $('#logout').hidden = true;
  $('#who').textContent = '';
  $('#login-error').textContent = message || '';
}

async function login(token) {
  state.token = token;
  try {
    await api('/api');
  } catch (e) {
    state.token = null;
    showLogin(e instanceof ApiError && e.status === 401 ? 'That token was refused (401 Unauthorized).' : describeError(e));
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  $('#login').hidden = true;
  $('#nav').hidden = false;
  $('#ns-picker').hidden = false;
  $('#logout').hidden = false;
  $('#ns-input').value = state.ns;
  try {
    const review = await api('/apis/authentication.k8s.io/v1/selfsubjectreviews', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' }),
    });
    $('#who').textContent = review.status.userInfo.username;
  } catch (_) {
    $('#who').textContent = '';
  }
  fillNamespaces();
  route();
}

// Namespaces for the picker, when the user may list them.
async function fillNamespaces() {
  try {
    const list = await api('/api/v1/namespaces');
    $('#ns-list').replaceChildren(...list.items.map((n) => h('option', { value: n.metadata.name })));
  } catch (_) { /* the picker still takes a typed name */ }
}

function setNamespace(ns) {
  if (ns === state.ns) return;
  state.ns = ns;
  sessionStorage.setItem(NS_KEY, ns);
  clearView();
  stopInformers();
  route();
}

function init() {
  // A token in the fragment (never sent to the server) logs in at once and is then
  // removed from the address bar and history.
  const frag = new URLSearchParams(location.hash.replace(/^#/, ''));
  if (frag.has('token')) {
    const token = frag.get('token');
    if (frag.has('ns')) { state.ns = frag.get('ns'); sessionStorage.setItem(NS_KEY, state.ns); }
    history.replaceState(null, '', location.pathname + location.search + '#/' + (frag.get('view') || 'overview'));
    state.token = token;
  }
  $('#login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('#token-input').value.trim();
    $('#token-input').value = '';
    if (token) login(token);
  });
  $('#logout').addEventListener('click', () => logout(''));
  $('#ns-input').addEventListener('change', (ev) => setNamespace(ev.target.value.trim()));
  window.addEventListener('hashchange', route);
  if (state.token) login(state.token);
  else showLogin('');
}

init();
