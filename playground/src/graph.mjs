// The picture of a runbook: its step graph drawn as SVG from the policy envelope (and, during a simulation,
// the run's status and report).
//
// Layout: dagre (a maintained layered-graph layout) places the start marker, the steps, the terminals and the
// labels of the routes, top to bottom, each box as wide as its own text; the SVG's viewBox is the whole
// drawing, so the page scales it down (or scrolls) and never cuts a box off.

import dagre from '@dagrejs/dagre';

const NS = 'http://www.w3.org/2000/svg';
const CHAR = 7.25; // width of one character of the 12px monospace font, estimated
const SMALL_CHAR = 6.4; // 11px sans, estimated
const MAX_CHARS = 58;
const LINE = 16;
const HEAD = 30;
const PAD = 20;

// Colours and fonts are presentation attributes, not CSS, so the SVG stands on its own (downloaded, or
// shown elsewhere) and the page's strict Content-Security-Policy needs no inline style.
const MONO = 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace';
const SANS = 'system-ui, "DejaVu Sans", Arial, sans-serif';
const RISK_FILL = { 'read-only': '#e3f2e6', mutating: '#fff1d6', destructive: '#fde0dc', irreversible: '#f7c5cc' };
const EDGE = {
  next: { stroke: '#34495e', 'stroke-width': 1.6 },
  fail: { stroke: '#c0392b', 'stroke-width': 1.6, 'stroke-dasharray': '6 4' },
  retry: { stroke: '#1f6fbf', 'stroke-width': 1.8, 'stroke-dasharray': '2 3' },
};
const LINE_FILL = { scope: '#22313f', none: '#7a8793', undeclared: '#b3261e', deviation: '#a3521a', 'run-info': '#4a5560' };
const ASSERT_FILL = { pass: '#1e7b34', fail: '#b3261e', unevaluable: '#8a6d00' };

function el(tag, attrs = {}, children = []) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, String(v));
  }
  for (const c of [].concat(children)) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return e;
}

function clip(s, n = MAX_CHARS) {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

/** Steps in route order: the `next` chain from `initial`, then what branches reach, then the rest. */
export function routeOrder(env) {
  const steps = env.steps;
  const retryTargets = {};
  for (const key of Object.keys(env.budgets)) {
    const [from, to] = key.split('->');
    (retryTargets[from] ??= []).push(to);
  }
  const seen = new Set();
  const out = [];
  const pending = env.initial ? [env.initial] : [];
  const run = () => {
    while (pending.length) {
      let id = pending.shift();
      while (id !== null && Object.hasOwn(steps, id) && !seen.has(id)) {
        seen.add(id);
        out.push(id);
        const s = steps[id];
        if (s.on_fail) pending.push(s.on_fail);
        for (const t of retryTargets[id] ?? []) pending.push(t);
        id = s.next;
      }
    }
  };
  run();
  for (const id of Object.keys(steps).sort()) {
    if (!seen.has(id)) {
      pending.push(id);
      run();
    }
  }
  return out;
}

/** Every route of the envelope: `{from, to, kind: next|on_fail|retry, max}`. */
export function routes(env) {
  const out = [];
  for (const [id, s] of Object.entries(env.steps)) {
    if (s.next !== null) out.push({ from: id, to: s.next, kind: 'next' });
    if (s.on_fail !== null) out.push({ from: id, to: s.on_fail, kind: 'on_fail' });
  }
  for (const [key, max] of Object.entries(env.budgets)) {
    const i = key.indexOf('->');
    out.push({ from: key.slice(0, i), to: key.slice(i + 2), kind: 'retry', max, key });
  }
  return out;
}

function stepLines(env, id, sim) {
  const s = env.steps[id];
  const lines = [];
  for (const cap of s.tools) {
    const c = env.capabilities[cap];
    const tool = c ? c.tool : '?';
    const text = cap === tool ? `${cap}` : `${cap} → ${tool}`;
    lines.push({ text: `${text}${c?.when ? ' (when)' : ''}`, cls: 'scope', title: c?.when ? `${cap}: ${tool} when ${JSON.stringify(c.when)}` : `${cap}: ${tool}, ${c?.risk ?? '?'}` });
  }
  if (s.tools.length === 0) lines.push({ text: 'no tool in scope', cls: 'scope none' });
  for (const u of env.undeclared.filter((u) => u.step === id)) {
    lines.push({ text: `undeclared tool: ${u.tool}`, cls: 'undeclared', flag: true, title: `${u.tool} is named by step ${id} but no capability declares it: never in scope` });
  }
  const st = sim?.report?.steps?.[id];
  if (st) {
    const bits = [`visits ${st.visits}`];
    if (st.assert) bits.push(`assert ${st.assert}`);
    lines.push({ text: bits.join(' · '), cls: 'run-info', assert: st.assert });
  }
  const devs = (sim?.report?.deviations ?? []).filter((d) => d.step === id);
  if (devs.length) {
    lines.push({ text: `${devs.length} deviation${devs.length > 1 ? 's' : ''}: ${[...new Set(devs.map((d) => d.class))].join(', ')}`, cls: 'deviation', flag: true });
  }
  return lines;
}

/**
 * Draws the step graph of `env` (a parsed envelope). `sim`: `{current, report}` of a simulated run, or null.
 * Returns the <svg> element; its viewBox holds every box, route and label (fitGraph widens it further to what
 * the browser measured once the SVG is in the page).
 */
export function drawGraph(env, sim = null) {
  const ids = routeOrder(env);
  const title = `Step graph of ${env.document.runbook_id} ${env.document.version}`;
  if (ids.length === 0) return drawNoSteps(env, title);

  const stepSet = new Set(ids);
  const all = routes(env).filter((r) => stepSet.has(r.from));
  const terminalNames = new Set(env.terminals);
  // Route targets that are neither steps nor terminals (lint says `unknown-route`): drawn as ghosts.
  const unknown = [...new Set(all.map((r) => r.to).filter((t) => !stepSet.has(t) && !terminalNames.has(t)))].sort();
  const terms = [...env.terminals, ...unknown];

  // ---- sizes: each box as wide as its own text ----
  const lines = new Map(ids.map((id) => [id, stepLines(env, id, sim)]));
  const headChars = (id) => id.length + 2 + env.steps[id].risk.length + (env.steps[id].gated ? 8 : 0) + (env.steps[id].assert ? 0 : 8);
  const stepW = (id) => Math.max(170, Math.ceil(Math.max(headChars(id) * CHAR + 36, ...lines.get(id).map((l) => Math.min(l.text.length, MAX_CHARS) * CHAR + (l.flag ? 16 : 0))) + 26));
  const stepH = (id) => HEAD + lines.get(id).length * LINE + 8;
  const termW = (t) => Math.ceil((t.length + (unknown.includes(t) ? 2 : 0)) * CHAR) + 34;

  // ---- the layout: dagre's layered drawing, top to bottom ----
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'TB', nodesep: 30, ranksep: 40, edgesep: 16, marginx: PAD, marginy: PAD });
  g.setDefaultEdgeLabel(() => ({}));
  const node = (kind, name) => `${kind}\u0000${name}`;
  const target = (t) => (stepSet.has(t) ? node('s', t) : node('t', t));
  g.setNode(node('start', ''), { width: 12, height: 12 });
  for (const id of ids) g.setNode(node('s', id), { width: stepW(id), height: stepH(id) });
  for (const t of terms) g.setNode(node('t', t), { width: termW(t), height: 30 });
  if (env.initial && stepSet.has(env.initial)) g.setEdge(node('start', ''), node('s', env.initial), { weight: 8, width: 36, height: 14, labelpos: 'r', labeloffset: 6 }, 'start');
  const edges = all.map((r, n) => {
    const text = label(r, sim);
    const kind = r.kind === 'on_fail' ? 'fail' : r.kind;
    g.setEdge(node('s', r.from), target(r.to), {
      width: Math.ceil(text.length * SMALL_CHAR) + 8, height: 14, labelpos: 'r', labeloffset: 6,
      weight: r.kind === 'next' ? 4 : 1, minlen: 1,
    }, String(n));
    return { ...r, kind, text, name: String(n) };
  });
  dagre.layout(g);
  const { width, height } = g.graph();
  const pos = (v) => {
    const n = g.node(v);
    return { x: n.x - n.width / 2, y: n.y - n.height / 2, w: n.width, h: n.height };
  };

  // ---- draw ----
  const svg = el('svg', {
    xmlns: NS, viewBox: `0 0 ${Math.ceil(width)} ${Math.ceil(height)}`, width: Math.ceil(width), height: Math.ceil(height), role: 'img', 'aria-labelledby': 'graph-title graph-desc', class: 'graph',
  });
  const gated = ids.filter((id) => env.steps[id].gated);
  svg.append(
    el('title', { id: 'graph-title' }, title),
    el('desc', { id: 'graph-desc' }, `${ids.length} steps (${ids.join(', ')}); terminals ${env.terminals.join(', ') || 'none'}; gated: ${gated.join(', ') || 'none'}${env.undeclared.length ? `; undeclared tools: ${env.undeclared.map((u) => `${u.tool} in ${u.step}`).join(', ')}` : ''}.`),
    defs(),
    el('rect', { x: 0, y: 0, width: Math.ceil(width), height: Math.ceil(height), class: 'bg', fill: '#fbfbfd' }),
  );
  const edgeLayer = el('g', { class: 'edges' });
  const labelLayer = el('g', { class: 'labels' });
  const nodeLayer = el('g', { class: 'nodes' });
  svg.append(edgeLayer, nodeLayer, labelLayer);

  // start marker
  const sp = g.node(node('start', ''));
  nodeLayer.append(el('circle', { cx: sp.x, cy: sp.y, r: 6, class: 'start', fill: '#34495e' }));
  const startEdge = g.edge(node('start', ''), node('s', env.initial ?? ''), 'start');
  if (startEdge) {
    edgeLayer.append(el('path', { d: pathOf(startEdge.points), class: 'edge next', fill: 'none', ...EDGE.next, 'marker-end': 'url(#arrow-next)' }));
    labelLayer.append(el('text', { x: startEdge.x - startEdge.width / 2 + 4, y: startEdge.y + 4, class: 'elabel', ...labelPaint('next') }, 'start'));
  }

  for (const e of edges) {
    const laid = g.edge(node('s', e.from), target(e.to), e.name);
    if (!laid?.points?.length) continue;
    if (e.from === e.to) {
      // A retry of the step itself: a loop on the box's right side, its label beside it (dagre kept the room).
      const b = pos(node('s', e.from));
      const x0 = b.x + b.w;
      const cy = b.y + b.h / 2;
      edgeLayer.append(el('path', { d: `M${x0},${cy - 8} C${x0 + 34},${cy - 24} ${x0 + 34},${cy + 24} ${x0 + 3},${cy + 8}`, class: `edge ${e.kind}`, fill: 'none', ...EDGE[e.kind], 'marker-end': `url(#arrow-${e.kind})`, 'data-from': e.from, 'data-to': e.to, 'data-kind': e.kind === 'fail' ? 'on_fail' : e.kind }));
      labelLayer.append(el('text', { x: x0 + 32, y: cy + 4, class: `elabel ${e.kind}`, ...labelPaint(e.kind) }, e.text));
      continue;
    }
    edgeLayer.append(el('path', { d: pathOf(laid.points), class: `edge ${e.kind}`, fill: 'none', ...EDGE[e.kind], 'marker-end': `url(#arrow-${e.kind})`, 'data-from': e.from, 'data-to': e.to, 'data-kind': e.kind === 'fail' ? 'on_fail' : e.kind }));
    if (e.text && laid.x !== undefined) {
      labelLayer.append(el('text', { x: laid.x - laid.width / 2 + 4, y: laid.y + 4, class: `elabel ${e.kind}`, ...labelPaint(e.kind) }, e.text));
    }
  }

  // step boxes
  for (const id of ids) {
    const s = env.steps[id];
    const b = pos(node('s', id));
    const W = b.w;
    const current = sim?.current === id;
    const visited = (sim?.report?.steps?.[id]?.visits ?? 0) > 0;
    const hasUndeclared = env.undeclared.some((u) => u.step === id);
    const gn = el('g', {
      class: `node step${s.gated ? ' gated' : ''}${current ? ' current' : ''}${visited ? ' visited' : ''}${hasUndeclared ? ' has-undeclared' : ''}`,
      'data-step': id,
    });
    gn.append(el('title', {}, `step ${id}: risk ${s.risk}${s.gated ? ', gated (a human approves each visit)' : ''}${s.assert ? ', judged by assert' : ', prose only (needs a verdict at R2)'}; next ${s.next ?? 'none'}${s.on_fail ? `, on_fail ${s.on_fail}` : ''}`));
    const fill = current ? '#fff3bf' : visited ? '#eef6ee' : s.gated ? '#fff7f5' : '#ffffff';
    const stroke = current ? '#c99700' : s.gated || hasUndeclared ? '#b3261e' : '#5b6b7f';
    const strokeWidth = current ? 4 : s.gated ? 3 : 1.5;
    gn.append(el('rect', { x: b.x, y: b.y, width: W, height: b.h, rx: 6, class: 'box', fill, stroke, 'stroke-width': strokeWidth, 'stroke-dasharray': hasUndeclared && !s.gated ? '5 3' : null }));
    gn.append(el('text', { x: b.x + 12, y: b.y + 20, class: 'sid', 'font-family': MONO, 'font-size': 13, 'font-weight': 700, fill: '#1b2733' }, id));
    let bx = b.x + W - 10;
    const badge = (text, cls) => {
      const w = Math.ceil(text.length * SMALL_CHAR) + 12;
      bx -= w;
      const bfill = cls === 'gate' ? '#b3261e' : cls === 'prose' ? '#e8e8f0' : RISK_FILL[s.risk] ?? '#eee';
      gn.append(el('rect', { x: bx, y: b.y + 7, width: w, height: 17, rx: 8, class: `badge ${cls}`, fill: bfill }));
      gn.append(el('text', { x: bx + w / 2, y: b.y + 19.5, 'text-anchor': 'middle', class: `btext ${cls}`, 'font-family': SANS, 'font-size': 11, 'font-weight': cls === 'gate' ? 700 : 400, fill: cls === 'gate' ? '#ffffff' : '#1b2733' }, text));
      bx -= 5;
    };
    badge(s.risk, `risk-${s.risk}`);
    if (s.gated) badge('gated', 'gate');
    if (!s.assert) badge('prose', 'prose');
    gn.append(el('line', { x1: b.x, x2: b.x + W, y1: b.y + HEAD - 2, y2: b.y + HEAD - 2, class: 'sep', stroke: '#d5dbe1' }));
    for (const [k, l] of lines.get(id).entries()) {
      const ty = b.y + HEAD + 12 + k * LINE;
      let tx = b.x + 12;
      if (l.flag) {
        gn.append(el('path', { d: `M${tx + 5},${ty - 10} l6,11 h-12 z`, class: `flag ${l.cls}`, fill: LINE_FILL[l.cls] }));
        tx += 16;
      }
      const kind = l.cls.split(' ').pop();
      const lfill = l.assert ? ASSERT_FILL[l.assert] : LINE_FILL[kind] ?? '#22313f';
      const t = el('text', { x: tx, y: ty, class: `line ${l.cls}`, 'font-family': MONO, 'font-size': 12, fill: lfill }, clip(l.text));
      gn.append(l.title ? el('g', {}, [el('title', {}, l.title), t]) : t);
    }
    nodeLayer.append(gn);
  }

  // terminals
  for (const t of terms) {
    const p = pos(node('t', t));
    const isUnknown = unknown.includes(t);
    const current = sim?.current === t;
    const gn = el('g', { class: `node terminal${isUnknown ? ' unknown' : ''}${current ? ' current' : ''}`, 'data-terminal': t });
    gn.append(el('title', {}, isUnknown ? `${t}: a route goes here, but it is neither a step nor a terminal` : `terminal ${t}: a run may end here`));
    gn.append(el('rect', {
      x: p.x, y: p.y, width: p.w, height: p.h, rx: 15, class: 'box',
      fill: current ? '#fff3bf' : isUnknown ? '#ffffff' : '#e8f0fe',
      stroke: current ? '#c99700' : isUnknown ? '#b3261e' : '#1f4e8c',
      'stroke-width': current ? 4 : 1.5,
      'stroke-dasharray': isUnknown ? '4 3' : null,
    }));
    gn.append(el('text', { x: p.x + p.w / 2, y: p.y + 19.5, 'text-anchor': 'middle', class: 'tname', 'font-family': MONO, 'font-size': 12, 'font-weight': 700, fill: isUnknown ? '#b3261e' : '#1f4e8c' }, isUnknown ? `${t} ?` : t));
    nodeLayer.append(gn);
  }
  return svg;
}

/** A smooth path through dagre's points: straight ends, quadratic bends through the middle points. */
function pathOf(points) {
  const f = (n) => Math.round(n * 10) / 10;
  let d = `M${f(points[0].x)},${f(points[0].y)}`;
  for (let i = 1; i < points.length - 1; i++) {
    const p = points[i];
    const q = points[i + 1];
    d += ` Q${f(p.x)},${f(p.y)} ${f((p.x + q.x) / 2)},${f((p.y + q.y) / 2)}`;
  }
  const last = points[points.length - 1];
  return `${d} L${f(last.x)},${f(last.y)}`;
}

/**
 * Once the SVG is in the page: grows its viewBox (never shrinks it) to hold everything drawn, as the browser
 * measured it, so that text a little wider than estimated is not cut off either.
 */
export function fitGraph(svg) {
  const [x0, y0, w0, h0] = svg.getAttribute('viewBox').split(/\s+/).map(Number);
  let box;
  try {
    box = [...svg.querySelectorAll(':scope > g')].map((g) => g.getBBox()).filter((b) => b.width || b.height);
  } catch {
    return;
  }
  if (!box.length) return;
  const m = 6;
  const x = Math.floor(Math.min(x0, ...box.map((b) => b.x - m)));
  const y = Math.floor(Math.min(y0, ...box.map((b) => b.y - m)));
  const r = Math.ceil(Math.max(x0 + w0, ...box.map((b) => b.x + b.width + m)));
  const bottom = Math.ceil(Math.max(y0 + h0, ...box.map((b) => b.y + b.height + m)));
  if (x === x0 && y === y0 && r === x0 + w0 && bottom === y0 + h0) return;
  svg.setAttribute('viewBox', `${x} ${y} ${r - x} ${bottom - y}`);
  svg.setAttribute('width', r - x);
  svg.setAttribute('height', bottom - y);
  const bg = svg.querySelector(':scope > rect.bg');
  if (bg) {
    bg.setAttribute('x', x);
    bg.setAttribute('y', y);
    bg.setAttribute('width', r - x);
    bg.setAttribute('height', bottom - y);
  }
}

function labelPaint(kind) {
  return { 'font-family': SANS, 'font-size': 11, fill: EDGE[kind].stroke, stroke: '#fbfbfd', 'stroke-width': 3, 'paint-order': 'stroke', 'stroke-linejoin': 'round' };
}

function label(e, sim) {
  if (e.kind === 'retry') {
    const used = sim?.report?.budgets?.[e.key]?.used;
    return used === undefined ? `retry ≤${e.max}` : `retry ${used}/${e.max}`;
  }
  if (e.kind === 'on_fail') return 'on_fail';
  return 'next';
}

function defs() {
  const marker = (id) => el('marker', { id: `arrow-${id}`, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, [
    el('path', { d: 'M0,0 L10,5 L0,10 z', class: `arrowhead ${id}`, fill: EDGE[id].stroke }),
  ]);
  return el('defs', {}, [marker('next'), marker('fail'), marker('retry')]);
}

/** A document without steps (P0): its checkpoints, which the run observes from the tool-call stream. */
function drawNoSteps(env, title) {
  const cps = env.checkpoints;
  const rows = cps.map((c) => `${c.id}: ${c.kind === 'tool_call' ? `a call of ${c.match?.tool}` : `condition ${c.condition}`}${c.required ? ', required' : ''}${c.timeout_ms !== null ? `, within ${c.timeout_ms} ms` : ''}`);
  const heading = cps.length ? 'No steps: the run is judged by its checkpoints' : 'No steps and no checkpoints: nothing to draw';
  const W = Math.max(320, Math.ceil(Math.max(heading.length, ...rows.map((r) => r.length)) * CHAR) + 40);
  const height = PAD * 2 + 30 + rows.length * 44;
  const svg = el('svg', { xmlns: NS, viewBox: `0 0 ${W + PAD * 2} ${height}`, width: W + PAD * 2, height, role: 'img', 'aria-labelledby': 'graph-title graph-desc', class: 'graph' });
  svg.append(el('title', { id: 'graph-title' }, title), el('desc', { id: 'graph-desc' }, `${heading}. ${rows.join('; ')}`), el('rect', { x: 0, y: 0, width: W + PAD * 2, height, class: 'bg', fill: '#fbfbfd' }));
  svg.append(el('text', { x: PAD, y: PAD + 14, class: 'sid', 'font-family': SANS, 'font-size': 13, 'font-weight': 700, fill: '#1b2733' }, heading));
  rows.forEach((r, k) => {
    const y = PAD + 30 + k * 44;
    const g = el('g', { class: 'node checkpoint', 'data-checkpoint': cps[k].id });
    g.append(el('rect', { x: PAD, y, width: W, height: 34, rx: 6, class: 'box', fill: '#ffffff', stroke: '#5b6b7f', 'stroke-width': 1.5 }), el('text', { x: PAD + 12, y: y + 22, class: 'line scope', 'font-family': MONO, 'font-size': 12, fill: '#22313f' }, clip(r, 80)));
    svg.append(g);
  });
  return svg;
}
