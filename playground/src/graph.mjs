// The picture of a runbook: its step graph drawn as SVG from the policy envelope (and, during a simulation,
// the run's status and report).
//
// Layout (no library): the steps stand in one column in route order (the `next` chain from the first step,
// then the steps that branches reach); an arrow straight down is `next` to the step below. Other routes run
// in lanes: forward ones on the right, backward ones (and retries) on the left, each in the first lane free
// over its span. Terminals stand in a column on the right at the height of the steps that reach them; the
// end of the main chain sits under the column.

const NS = 'http://www.w3.org/2000/svg';
const CHAR = 7.25; // width of one character of the 12px monospace font, estimated
const SMALL_CHAR = 6.4; // 11px sans, estimated
const MAX_CHARS = 58;
const LINE = 16;
const HEAD = 30;
const GAP = 46;
const LANE = 16;
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
 * Returns the <svg> element.
 */
export function drawGraph(env, sim = null) {
  const ids = routeOrder(env);
  const title = `Step graph of ${env.document.runbook_id} ${env.document.version}`;
  if (ids.length === 0) return drawNoSteps(env, title);

  const stepIndex = new Map(ids.map((id, i) => [id, i]));
  const all = routes(env);
  const terminalNames = new Set(env.terminals);
  // Route targets that are neither steps nor terminals (lint says `unknown-route`): drawn as ghosts.
  const unknown = [...new Set(all.map((r) => r.to).filter((t) => !stepIndex.has(t) && !terminalNames.has(t)))].sort();

  // ---- step boxes ----
  const lines = new Map(ids.map((id) => [id, stepLines(env, id, sim)]));
  const headChars = (id) => id.length + 2 + env.steps[id].risk.length + (env.steps[id].gated ? 8 : 0) + 8;
  const widest = Math.max(...ids.map((id) => Math.max(headChars(id), ...lines.get(id).map((l) => Math.min(l.text.length, MAX_CHARS) + (l.flag ? 3 : 0)))));
  const W = Math.max(230, Math.ceil(widest * CHAR) + 28);
  const heights = ids.map((id) => HEAD + lines.get(id).length * LINE + 8);

  // ---- lanes for routes that are not "down to the next box" ----
  const last = ids[ids.length - 1];
  const bottomTerminal = env.steps[last].next !== null && !stepIndex.has(env.steps[last].next) ? env.steps[last].next : null;
  const edges = all.map((r) => {
    const fi = stepIndex.get(r.from);
    const ti = stepIndex.get(r.to);
    let shape;
    if (fi === undefined) shape = 'none';
    else if (ti === undefined) shape = r.to === bottomTerminal && r.from === last && r.kind === 'next' ? 'down-terminal' : 'terminal';
    else if (ti === fi) shape = 'self';
    else if (ti === fi + 1 && r.kind === 'next') shape = 'down';
    else shape = ti > fi ? 'right' : 'left';
    return { ...r, fi, ti, shape };
  });
  const assignLanes = (list) => {
    const lanes = [];
    list.sort((a, b) => Math.abs(a.ti - a.fi) - Math.abs(b.ti - b.fi) || a.fi - b.fi);
    for (const e of list) {
      const lo = Math.min(e.fi, e.ti);
      const hi = Math.max(e.fi, e.ti);
      let k = lanes.findIndex((used) => used.every(([a, b]) => hi < a || lo > b));
      if (k < 0) {
        k = lanes.length;
        lanes.push([]);
      }
      lanes[k].push([lo, hi]);
      e.lane = k;
    }
    return lanes.length;
  };
  const rightLanes = assignLanes(edges.filter((e) => e.shape === 'right'));
  const leftLanes = assignLanes(edges.filter((e) => e.shape === 'left'));
  const selfLabels = edges.filter((e) => e.shape === 'self').map((e) => label(e, sim));
  const leftLabelChars = Math.max(0, ...selfLabels.map((l) => l.length), ...edges.filter((e) => e.shape === 'left').map((e) => label(e, sim).length));
  const hasSelf = selfLabels.length > 0;

  const colX = PAD + Math.ceil(leftLabelChars * SMALL_CHAR) + 8 + (hasSelf ? 30 : 0) + leftLanes * LANE + (leftLanes ? 10 : 0);
  const startY = PAD + 34; // room for the start marker
  const ys = [];
  let y = startY;
  for (const h of heights) {
    ys.push(y);
    y += h + GAP;
  }
  const columnBottom = y - GAP;
  const box = (i) => ({ x: colX, y: ys[i], w: W, h: heights[i] });

  // ---- terminals: bottom, or on the right at the height of what reaches them ----
  const rightTerms = [...env.terminals.filter((t) => t !== bottomTerminal), ...unknown];
  const termW = (t) => Math.ceil((t.length + (unknown.includes(t) ? 2 : 0)) * CHAR) + 34;
  const termX = colX + W + 24 + rightLanes * LANE + (rightLanes ? 16 : 0) + 60;
  const desired = new Map();
  for (const t of rightTerms) {
    const from = edges.filter((e) => e.to === t && e.fi !== undefined).map((e) => ys[e.fi] + heights[e.fi] / 2);
    desired.set(t, from.length ? from.reduce((a, b) => a + b, 0) / from.length : columnBottom);
  }
  rightTerms.sort((a, b) => desired.get(a) - desired.get(b) || (a < b ? -1 : 1));
  const termPos = new Map();
  let nextFree = startY;
  for (const t of rightTerms) {
    const ty = Math.max(desired.get(t) - 15, nextFree);
    termPos.set(t, { x: termX, y: ty, w: termW(t), h: 30 });
    nextFree = ty + 30 + 14;
  }
  let height = Math.max(columnBottom, nextFree) + PAD;
  if (bottomTerminal !== null) {
    const w = termW(bottomTerminal);
    termPos.set(bottomTerminal, { x: colX + W / 2 - w / 2, y: columnBottom + GAP, w, h: 30 });
    height = Math.max(height, columnBottom + GAP + 30 + PAD);
  }
  const width = Math.max(colX + W + PAD, ...[...termPos.values()].map((p) => p.x + p.w + PAD));

  // ---- ports: where routes leave and enter a box's sides, spread along them ----
  const ports = { right: new Map(), left: new Map() };
  const addPort = (side, i, key, otherY) => {
    const m = ports[side];
    if (!m.has(i)) m.set(i, []);
    m.get(i).push({ key, otherY });
  };
  const centerY = (i) => ys[i] + heights[i] / 2;
  for (const [n, e] of edges.entries()) {
    if (e.shape === 'terminal') addPort('right', e.fi, `${n}:from`, termPos.get(e.to).y + 15);
    if (e.shape === 'right') {
      addPort('right', e.fi, `${n}:from`, centerY(e.ti));
      addPort('right', e.ti, `${n}:to`, centerY(e.fi));
    }
    if (e.shape === 'left') {
      addPort('left', e.fi, `${n}:from`, centerY(e.ti));
      addPort('left', e.ti, `${n}:to`, centerY(e.fi));
    }
  }
  const portY = new Map();
  for (const side of ['right', 'left']) {
    for (const [i, list] of ports[side]) {
      list.sort((a, b) => a.otherY - b.otherY);
      const top = ys[i] + 12;
      const span = heights[i] - 20;
      list.forEach((p, k) => portY.set(`${side}:${p.key}`, top + (span * (k + 1)) / (list.length + 1)));
    }
  }

  // ---- draw ----
  const svg = el('svg', {
    xmlns: NS, viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-labelledby': 'graph-title graph-desc', class: 'graph',
  });
  const gated = ids.filter((id) => env.steps[id].gated);
  svg.append(
    el('title', { id: 'graph-title' }, title),
    el('desc', { id: 'graph-desc' }, `${ids.length} steps (${ids.join(', ')}); terminals ${env.terminals.join(', ') || 'none'}; gated: ${gated.join(', ') || 'none'}${env.undeclared.length ? `; undeclared tools: ${env.undeclared.map((u) => `${u.tool} in ${u.step}`).join(', ')}` : ''}.`),
    defs(),
    el('rect', { x: 0, y: 0, width, height, class: 'bg', fill: '#fbfbfd' }),
  );
  const edgeLayer = el('g', { class: 'edges' });
  const labelLayer = el('g', { class: 'labels' });
  const nodeLayer = el('g', { class: 'nodes' });
  svg.append(edgeLayer, nodeLayer, labelLayer);

  // start marker
  const sx = colX + W / 2;
  nodeLayer.append(el('circle', { cx: sx, cy: PAD + 6, r: 6, class: 'start' }));
  nodeLayer.lastChild.setAttribute('fill', '#34495e');
  edgeLayer.append(el('path', { d: `M${sx},${PAD + 12} V${startY - 2}`, class: 'edge next', fill: 'none', ...EDGE.next, 'marker-end': 'url(#arrow-next)' }));
  labelLayer.append(el('text', { x: sx + 12, y: PAD + 10, class: 'elabel', ...labelPaint('next') }, 'start'));

  const r = 8;
  for (const [n, e] of edges.entries()) {
    if (e.shape === 'none') continue;
    const cls = `edge ${e.kind === 'on_fail' ? 'fail' : e.kind}`;
    const marker = `url(#arrow-${e.kind === 'on_fail' ? 'fail' : e.kind})`;
    const b = box(e.fi);
    const text = label(e, sim);
    let d;
    let lx;
    let ly;
    let anchor = 'start';
    if (e.shape === 'down') {
      d = `M${b.x + W / 2},${b.y + b.h} V${ys[e.ti] - 2}`;
    } else if (e.shape === 'down-terminal') {
      d = `M${b.x + W / 2},${b.y + b.h} V${termPos.get(e.to).y - 2}`;
    } else if (e.shape === 'terminal') {
      const p = termPos.get(e.to);
      const y0 = portY.get(`right:${n}:from`);
      const x0 = b.x + W;
      const x1 = p.x - 2;
      const y1 = p.y + 15;
      const mx = (x0 + x1) / 2;
      d = `M${x0},${y0} C${mx},${y0} ${mx},${y1} ${x1},${y1}`;
      lx = x0 + 6;
      ly = y0 - 4;
    } else if (e.shape === 'right' || e.shape === 'left') {
      const right = e.shape === 'right';
      const y0 = portY.get(`${e.shape}:${n}:from`);
      const y1 = portY.get(`${e.shape}:${n}:to`);
      const x0 = right ? b.x + W : b.x;
      const lane = right ? colX + W + 24 + e.lane * LANE : colX - 18 - e.lane * LANE;
      const dir = right ? 1 : -1;
      const vdir = y1 > y0 ? 1 : -1;
      const xEnd = x0 + dir * 2;
      d = `M${x0},${y0} H${lane - dir * r} Q${lane},${y0} ${lane},${y0 + vdir * r} V${y1 - vdir * r} Q${lane},${y1} ${lane - dir * r},${y1} H${xEnd}`;
      if (right) {
        lx = x0 + 4;
        ly = y0 - 4;
      } else {
        lx = lane - 6;
        ly = y0 - 4;
        anchor = 'end';
      }
    } else if (e.shape === 'self') {
      const y0 = b.y + b.h / 2 - 7;
      const y1 = b.y + b.h / 2 + 7;
      const x0 = b.x;
      d = `M${x0},${y0} C${x0 - 34},${y0 - 10} ${x0 - 34},${y1 + 10} ${x0 - 2},${y1}`;
      lx = x0 - 32;
      ly = b.y + b.h / 2 + 4;
      anchor = 'end';
    }
    const kind = e.kind === 'on_fail' ? 'fail' : e.kind;
    edgeLayer.append(el('path', { d, class: cls, fill: 'none', ...EDGE[kind], 'marker-end': marker, 'data-from': e.from, 'data-to': e.to, 'data-kind': e.kind }));
    if (text && lx !== undefined) {
      labelLayer.append(el('text', { x: lx, y: ly, class: `elabel ${kind}`, 'text-anchor': anchor, ...labelPaint(kind) }, text));
    }
  }

  // step boxes
  for (const [i, id] of ids.entries()) {
    const s = env.steps[id];
    const b = box(i);
    const current = sim?.current === id;
    const visited = (sim?.report?.steps?.[id]?.visits ?? 0) > 0;
    const g = el('g', {
      class: `node step${s.gated ? ' gated' : ''}${current ? ' current' : ''}${visited ? ' visited' : ''}${env.undeclared.some((u) => u.step === id) ? ' has-undeclared' : ''}`,
      'data-step': id,
    });
    g.append(el('title', {}, `step ${id}: risk ${s.risk}${s.gated ? ', gated (a human approves each visit)' : ''}${s.assert ? ', judged by assert' : ', prose only (needs a verdict at R2)'}; next ${s.next ?? 'none'}${s.on_fail ? `, on_fail ${s.on_fail}` : ''}`));
    const hasUndeclared = env.undeclared.some((u) => u.step === id);
    const fill = current ? '#fff3bf' : visited ? '#eef6ee' : s.gated ? '#fff7f5' : '#ffffff';
    const stroke = current ? '#c99700' : s.gated || hasUndeclared ? '#b3261e' : '#5b6b7f';
    const strokeWidth = current ? 4 : s.gated ? 3 : 1.5;
    g.append(el('rect', { x: b.x, y: b.y, width: W, height: b.h, rx: 6, class: 'box', fill, stroke, 'stroke-width': strokeWidth, 'stroke-dasharray': hasUndeclared && !s.gated ? '5 3' : null }));
    g.append(el('text', { x: b.x + 12, y: b.y + 20, class: 'sid', 'font-family': MONO, 'font-size': 13, 'font-weight': 700, fill: '#1b2733' }, id));
    let bx = b.x + W - 10;
    const badge = (text, cls) => {
      const w = Math.ceil(text.length * SMALL_CHAR) + 12;
      bx -= w;
      const bfill = cls === 'gate' ? '#b3261e' : cls === 'prose' ? '#e8e8f0' : RISK_FILL[s.risk] ?? '#eee';
      g.append(el('rect', { x: bx, y: b.y + 7, width: w, height: 17, rx: 8, class: `badge ${cls}`, fill: bfill }));
      g.append(el('text', { x: bx + w / 2, y: b.y + 19.5, 'text-anchor': 'middle', class: `btext ${cls}`, 'font-family': SANS, 'font-size': 11, 'font-weight': cls === 'gate' ? 700 : 400, fill: cls === 'gate' ? '#ffffff' : '#1b2733' }, text));
      bx -= 5;
    };
    badge(s.risk, `risk-${s.risk}`);
    if (s.gated) badge('gated', 'gate');
    if (!s.assert) badge('prose', 'prose');
    g.append(el('line', { x1: b.x, x2: b.x + W, y1: b.y + HEAD - 2, y2: b.y + HEAD - 2, class: 'sep', stroke: '#d5dbe1' }));
    for (const [k, l] of lines.get(id).entries()) {
      const ty = b.y + HEAD + 12 + k * LINE;
      let tx = b.x + 12;
      if (l.flag) {
        g.append(el('path', { d: `M${tx + 5},${ty - 10} l6,11 h-12 z`, class: `flag ${l.cls}`, fill: LINE_FILL[l.cls] }));
        tx += 16;
      }
      const kind = l.cls.split(' ').pop();
      const lfill = l.assert ? ASSERT_FILL[l.assert] : LINE_FILL[kind] ?? '#22313f';
      const t = el('text', { x: tx, y: ty, class: `line ${l.cls}`, 'font-family': MONO, 'font-size': 12, fill: lfill }, clip(l.text));
      g.append(l.title ? el('g', {}, [el('title', {}, l.title), t]) : t);
    }
    nodeLayer.append(g);
  }

  // terminals
  for (const [t, p] of termPos) {
    const isUnknown = unknown.includes(t);
    const current = sim?.current === t;
    const g = el('g', { class: `node terminal${isUnknown ? ' unknown' : ''}${current ? ' current' : ''}`, 'data-terminal': t });
    g.append(el('title', {}, isUnknown ? `${t}: a route goes here, but it is neither a step nor a terminal` : `terminal ${t}: a run may end here`));
    g.append(el('rect', {
      x: p.x, y: p.y, width: p.w, height: p.h, rx: 15, class: 'box',
      fill: current ? '#fff3bf' : isUnknown ? '#ffffff' : '#e8f0fe',
      stroke: current ? '#c99700' : isUnknown ? '#b3261e' : '#1f4e8c',
      'stroke-width': current ? 4 : 1.5,
      'stroke-dasharray': isUnknown ? '4 3' : null,
    }));
    g.append(el('text', { x: p.x + p.w / 2, y: p.y + 19.5, 'text-anchor': 'middle', class: 'tname', 'font-family': MONO, 'font-size': 12, 'font-weight': 700, fill: isUnknown ? '#b3261e' : '#1f4e8c' }, isUnknown ? `${t} ?` : t));
    nodeLayer.append(g);
  }
  return svg;
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
