// The official MCP conformance suite against two servers, each directly and through `runbook-host run
// --listen` (the proxy's Streamable HTTP side), once per protocol revision: our fixture (fixture/server.mjs,
// every tool, resource and prompt the suite's server scenarios call) and @modelcontextprotocol/server-everything
// (the reference server, not the suite's fixture). Started by ./run (which puts Node 22 or later on PATH);
// see README.md here for what it checks.
//
//   node run.mjs [--revision 2025-11-25|2026-07-28]... [--server fixture|everything]... [--direct-only]
//                [--out FILE] [--keep]
//   node run.mjs --table [--out FILE]      rewrite the table in docs/mcp-conformance.md from results.json, run nothing
//
// Environment: RUNBOOK_HOST, the binary (default: target/release/runbook-host of the repository, else
// $CARGO_TARGET_DIR/release/runbook-host); RUNBOOK_KEEP_TEST_DIRS=1 keeps the work directory (as --keep).
//
// Exit codes: 0 every check held; 1 a check failed (a scenario that passes against a server alone fails
// through the proxy with every tool declared; a left-out tool not blocked or not recorded; a bundle that
// does not verify; a declared call that did not pass); 2 the harness could not run (usage, a peer missing,
// the proxy or a server not starting, the time bound).

import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const MCP = path.resolve(HERE, "..");
const REPO = path.resolve(HERE, "../../../..");
// The book's page that holds the table (it was in the top-level README.md).
const README = path.join(REPO, "docs", "mcp-conformance.md");
const BEGIN = "<!-- mcp-conformance:begin -->";
const END = "<!-- mcp-conformance:end -->";
const RESULTS_SCHEMA = "runbook-mcp-conformance-results/v2";
const FIXTURE = path.join(HERE, "fixture", "server.mjs");

// Time bounds.
const SCENARIO_TIMEOUT_MS = 90_000; // one scenario process, wall clock (the 2026 suite's own bound is --timeout)
const SUITE_SCENARIO_TIMEOUT_MS = 30_000; // the 2026 suite's per-scenario --timeout
const START_TIMEOUT_MS = 60_000; // a server or the proxy until it listens
const STOP_TIMEOUT_MS = 30_000; // SIGTERM, then SIGKILL
const VERIFY_TIMEOUT_MS = 60_000; // one `runbook-host verify`
const REQUEST_TIMEOUT_MS = 30_000; // one probe request
const TOTAL_TIMEOUT_MS = 20 * 60_000; // everything (a whole run takes about 7 minutes)

const REVISIONS = {
  "2025-11-25": {
    alias: "conformance-2025",
    // 0.1.16 runs at the 2025-11-25 wire; its default ("active") suite leaves its pending scenarios out.
    scenarioArgs: () => [],
  },
  "2026-07-28": {
    alias: "conformance-2026",
    // One scenario at the 2026-07-28 wire (stateless); --force for the extension scenarios, which are
    // run and reported, never scored, as `--requirements 2026-07-28` does.
    scenarioArgs: () => ["--spec-version", "2026-07-28", "--force", "--timeout", String(SUITE_SCENARIO_TIMEOUT_MS)],
  },
};
const TARGETS = ["direct", "all", "some"];
const TARGET_TITLE = { direct: "direct", all: "via proxy (all tools)", some: "via proxy (some tools)" };
// The servers, in the order of the results and the table. Per server: the runbooks (`-all` declares every
// tool it lists, `-some` a part), the probe's calls (one tool both runbooks declare, one `-some` leaves out)
// and the tools it lists only to clients that declare a capability (the proxy declares none).
const SERVERS = {
  fixture: {
    title: "fixture",
    runbooks: { all: "fixture-all", some: "fixture-some" },
    probe: { declared: { name: "test_simple_text", arguments: {} }, leftOut: { name: "test_tool_with_logging", arguments: {} } },
    capabilityListed: null,
  },
  everything: {
    title: "server-everything",
    runbooks: { all: "everything-all", some: "everything-some" },
    probe: { declared: { name: "echo", arguments: { message: "conformance probe" } }, leftOut: { name: "get-sum", arguments: { a: 2, b: 3 } } },
    capabilityListed: /^(get-roots-list|trigger-(sampling|elicitation|url-elicitation))/,
  },
};
const runbookRef = (id, target) => `${SERVERS[id].runbooks[target]}@1.0.0`;

// ---------------------------------------------------------------------------------------------------------
// Children: each in its own process group, all killed when this script ends, however it ends.

// A group outlives its leader when the leader dies first (a proxy that crashed leaves its server), so
// groups are killed whole, also after their leader exited.
const children = new Set();
let workDir = null;
let keepWork = false;

function killGroup(child, signal) {
  try {
    process.kill(-child.pid, signal);
  } catch {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        child.kill(signal);
      } catch {}
    }
  }
}

function killAll() {
  for (const c of children) killGroup(c, "SIGKILL");
  children.clear();
  if (workDir && !keepWork) fs.rmSync(workDir, { recursive: true, force: true });
  else if (workDir) console.error(`conformance: kept ${workDir}`);
  workDir = null;
}

process.on("exit", killAll);
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    console.error(`conformance: ${sig}, stopping every child`);
    killAll();
    process.exit(2);
  });
}

function start(cmd, args, { cwd, env, log }) {
  const out = fs.openSync(log, "a");
  const child = spawn(cmd, args, { cwd, env: env ?? process.env, detached: true, stdio: ["ignore", out, "pipe"] });
  fs.closeSync(out);
  children.add(child);
  const exited = new Promise((resolve) => {
    child.on("exit", (code, signal) => resolve({ code, signal }));
    child.on("error", (e) => resolve({ code: null, signal: null, error: e.message }));
  });
  child.exited = exited;
  const logStream = fs.createWriteStream(log, { flags: "a" });
  child.stderrLines = [];
  let buf = "";
  child.stderr.on("data", (d) => {
    logStream.write(d);
    buf += d.toString("utf8");
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      child.stderrLines.push(line);
      child.emit("line", line);
    }
  });
  child.stderr.on("end", () => logStream.end());
  return child;
}

/** Waits for a stderr line matching `re` (its match), or the child's exit, or the timeout. */
function waitLine(child, re, timeoutMs) {
  return new Promise((resolve) => {
    for (const l of child.stderrLines) {
      const m = l.match(re);
      if (m) return resolve({ match: m });
    }
    const timer = setTimeout(() => done({ timedOut: true }), timeoutMs);
    const onLine = (l) => {
      const m = l.match(re);
      if (m) done({ match: m });
    };
    child.on("line", onLine);
    child.exited.then((e) => done({ exited: e }));
    function done(r) {
      clearTimeout(timer);
      child.off("line", onLine);
      resolve(r);
    }
  });
}

/**
 * SIGTERM to the leader alone (the proxy stops its own servers and ends its runs), SIGKILL to the group
 * after the bound; then SIGKILL to whatever of the group is left.
 */
async function stop(child, timeoutMs = STOP_TIMEOUT_MS) {
  let killed = false;
  if (child.exitCode === null && child.signalCode === null) {
    child.kill("SIGTERM");
    let timer;
    const r = await Promise.race([child.exited, new Promise((res) => (timer = setTimeout(() => res(null), timeoutMs)))]);
    clearTimeout(timer);
    if (!r) {
      killGroup(child, "SIGKILL");
      killed = true;
    }
  }
  const e = await child.exited;
  killGroup(child, "SIGKILL");
  children.delete(child);
  return { ...e, killed };
}

/** Runs a command to its end, bounded; its output goes to `log`. */
async function runBounded(cmd, args, { cwd, env, log, timeoutMs }) {
  const child = start(cmd, args, { cwd, env, log });
  let timer;
  const r = await Promise.race([child.exited, new Promise((res) => (timer = setTimeout(() => res(null), timeoutMs)))]);
  clearTimeout(timer);
  if (!r) killGroup(child, "SIGKILL");
  const e = await child.exited;
  killGroup(child, "SIGKILL");
  children.delete(child);
  return { ...e, timedOut: !r };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// ---------------------------------------------------------------------------------------------------------
// The suite: which scenarios a revision runs, and one scenario's outcome.

function suiteBin(rev) {
  return path.join(HERE, "node_modules", REVISIONS[rev].alias, "dist", "index.js");
}

function suiteVersion(rev) {
  return JSON.parse(fs.readFileSync(path.join(HERE, "node_modules", REVISIONS[rev].alias, "package.json"), "utf8")).version;
}

function nodeOut(args, timeoutMs = 60_000) {
  const r = spawnSync(process.execPath, args, { encoding: "utf8", timeout: timeoutMs });
  if (r.status !== 0 && r.status !== 1) throw new Error(`node ${args.join(" ")}: ${r.error?.message ?? r.stderr}`);
  return (r.stdout ?? "") + (r.stderr ?? "");
}

/**
 * The scenarios of a revision, in the suite's own order: [{name, scored, note}].
 * 2025-11-25: `list --server` of 0.1.16, less the scenarios of its "pending" suite (its default run leaves
 * them out): the pending names come from a run of that suite against a port where nothing listens, which
 * prints them and touches nothing.
 * 2026-07-28: `list --server --requirements 2026-07-28` of 0.2.0: the required server scenarios (scored), then
 * the server scenarios it runs and reports but never scores (extensions, pending), with that reason.
 */
async function plan(rev) {
  const bin = suiteBin(rev);
  if (rev === "2025-11-25") {
    const names = [...nodeOut([bin, "list", "--server"]).matchAll(/^\s+- (\S+)/gm)].map((m) => m[1]);
    const dead = await freePort();
    const pendingOut = nodeOut([bin, "server", "--suite", "pending", "--url", `http://127.0.0.1:${dead}/mcp`]);
    const pending = new Set([...pendingOut.matchAll(/^=== Running scenario: (\S+) ===/gm)].map((m) => m[1]));
    if (!names.length) throw new Error(`no scenario listed by ${REVISIONS[rev].alias}`);
    return names.filter((n) => !pending.has(n)).map((name) => ({ name, scored: true, note: null }));
  }
  const out = nodeOut([bin, "list", "--server", "--requirements", rev]);
  const scenarios = [];
  const server = out.slice(out.indexOf("Server scenarios"), out.indexOf("Client scenarios"));
  for (const m of server.matchAll(/^\s+- (\S+)\s*$/gm)) scenarios.push({ name: m[1], scored: true, note: null });
  const rest = out.slice(out.indexOf("Run and reported, but never scored"));
  let note = null;
  for (const line of rest.split("\n")) {
    const h = line.match(/^\s+([a-z-]+) \(\d+\):/);
    if (h) note = h[1];
    const m = line.match(/^\s+- (\S+) \[server\]/);
    if (m) scenarios.push({ name: m[1], scored: false, note });
  }
  if (!scenarios.length) throw new Error(`no scenario listed by ${REVISIONS[rev].alias} --requirements ${rev}`);
  return scenarios;
}

/** Runs one scenario against `url`; its outcome from the checks.json the suite saved. */
async function runScenario(rev, scenario, url, work, tag) {
  const out = path.join(work, "suite", tag, scenario);
  fs.mkdirSync(out, { recursive: true });
  const log = path.join(out, "suite.log");
  const args = [suiteBin(rev), "server", "--url", url, "--scenario", scenario, ...REVISIONS[rev].scenarioArgs(), "-o", out];
  const r = await runBounded(process.execPath, args, { cwd: work, log, timeoutMs: SCENARIO_TIMEOUT_MS });
  if (r.timedOut) return { status: "timeout", checks: { passed: 0, failed: 0 } };
  const dirs = fs.readdirSync(out, { withFileTypes: true }).filter((d) => d.isDirectory());
  const file = dirs.map((d) => path.join(out, d.name, "checks.json")).find((f) => fs.existsSync(f));
  if (!file) return { status: "error", checks: { passed: 0, failed: 0 } }; // the scenario threw
  let checks;
  try {
    checks = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch {
    return { status: "error", checks: { passed: 0, failed: 0 } };
  }
  const passed = checks.filter((c) => c.status === "SUCCESS").length;
  const failed = checks.filter((c) => c.status === "FAILURE").length;
  const status = failed ? "fail" : passed ? "pass" : "skipped";
  const outcome = { status, checks: { passed, failed } };
  // Why it failed, for the report of a regression (kept out of results.json: messages may name ports).
  Object.defineProperty(outcome, "why", { value: checks.filter((c) => c.status === "FAILURE").map((c) => `${c.id}: ${c.errorMessage ?? "failed"}`), enumerable: false });
  return outcome;
}

// ---------------------------------------------------------------------------------------------------------
// Run bundles: where each call went, and whether each bundle verifies.

function runDirs(runs) {
  if (!fs.existsSync(runs)) return [];
  return fs
    .readdirSync(runs, { withFileTypes: true })
    .filter((d) => d.isDirectory() && fs.existsSync(path.join(runs, d.name, "run.json")))
    .map((d) => d.name)
    .sort();
}

function eventLines(runs, id) {
  const f = path.join(runs, id, "events.ndjson");
  if (!fs.existsSync(f)) return [];
  return fs.readFileSync(f, "utf8").split("\n").filter(Boolean);
}

/** How many lines each run's events.ndjson holds now. */
function snapshot(runs) {
  const s = new Map();
  for (const id of runDirs(runs)) s.set(id, eventLines(runs, id).length);
  return s;
}

/** The tool calls written since `before`: [{tool, decision, deviation}], in order. */
function callsSince(runs, before) {
  const calls = [];
  for (const id of runDirs(runs)) {
    for (const line of eventLines(runs, id).slice(before.get(id) ?? 0)) {
      let rec;
      try {
        rec = JSON.parse(line);
      } catch {
        continue;
      }
      const ev = rec.event;
      if (ev && typeof ev === "object" && ev.type === "invoke") {
        calls.push({ tool: ev.tool, decision: rec.decision?.decision ?? null, deviation: rec.decision?.deviation ?? null });
      }
    }
  }
  return calls;
}

/** Compares arrays of strings by code unit (no locale). */
function cmp(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

/** Calls grouped and counted, in a stable order. */
function countCalls(calls) {
  const m = new Map();
  for (const c of calls) {
    const k = JSON.stringify([c.tool, c.decision, c.deviation]);
    m.set(k, (m.get(k) ?? 0) + 1);
  }
  return [...m.entries()]
    .map(([k, count]) => {
      const [tool, decision, deviation] = JSON.parse(k);
      return { tool, decision, deviation, count };
    })
    .sort((a, b) => cmp([a.tool, a.decision, a.deviation ?? ""], [b.tool, b.decision, b.deviation ?? ""]));
}

async function verifyAll(bin, runs, work) {
  const out = [];
  for (const id of runDirs(runs)) {
    const log = path.join(work, `verify-${path.basename(path.dirname(runs))}-${id}.log`);
    const r = await runBounded(bin, ["verify", "--format", "json", path.join(runs, id)], { cwd: work, log, timeoutMs: VERIFY_TIMEOUT_MS });
    out.push({ run: id, ok: !r.timedOut && r.code === 0, log });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// The probe: a small client of our own, over plain HTTP, that lists the tools and calls one declared and one
// left-out tool, so the blocked call is seen from both ends (the answer, the bundle).

async function rpc(url, body, headers) {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), REQUEST_TIMEOUT_MS);
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream", ...headers },
      body: JSON.stringify(body),
      signal: ac.signal,
    });
    const type = res.headers.get("content-type") ?? "";
    let msg;
    if (body.id === undefined) {
      await res.text().catch(() => {});
    } else if (type.includes("text/event-stream")) {
      // Read events until the answer to our request arrives (the stream may stay open after it).
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      outer: for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n/g, "\n");
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          const ev = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const data = ev
            .split("\n")
            .filter((l) => l.startsWith("data:"))
            .map((l) => l.slice(5).replace(/^ /, ""))
            .join("\n");
          if (!data) continue;
          try {
            const m = JSON.parse(data);
            if (m && m.id === body.id && ("result" in m || "error" in m)) {
              msg = m;
              break outer;
            }
          } catch {}
        }
      }
    } else {
      const text = await res.text();
      try {
        msg = text ? JSON.parse(text) : undefined;
      } catch {}
    }
    return { status: res.status, headers: res.headers, msg };
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
}

function summarizeCall(r) {
  if (r.msg?.error) return { ok: false, is_error: null, error: r.msg.error.message ?? "error", text: null };
  const result = r.msg?.result;
  if (!result) return { ok: false, is_error: null, error: `HTTP ${r.status}, no answer`, text: null };
  const text = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
  return { ok: true, is_error: result.isError === true, error: null, text };
}

/** Lists the tools, calls `spec.declared` and `spec.leftOut`. */
async function probe(rev, url, spec) {
  const clientInfo = { name: "runbook-conformance-probe", version: "1.0.0" };
  let id = 0;
  const out = { listed: null, declared: null, left_out: null, error: null };
  try {
    let send;
    let close = async () => {};
    if (rev === "2025-11-25") {
      const init = await rpc(url, { jsonrpc: "2.0", id: ++id, method: "initialize", params: { protocolVersion: rev, capabilities: {}, clientInfo } }, {});
      if (!init.msg?.result) throw new Error(`initialize: HTTP ${init.status} ${JSON.stringify(init.msg?.error ?? null)}`);
      const session = init.headers.get("mcp-session-id");
      const h = { "MCP-Protocol-Version": init.msg.result.protocolVersion ?? rev, ...(session ? { "Mcp-Session-Id": session } : {}) };
      await rpc(url, { jsonrpc: "2.0", method: "notifications/initialized" }, h);
      send = (method, params) => rpc(url, { jsonrpc: "2.0", id: ++id, method, params }, h);
      close = async () => {
        if (!session) return;
        const ac = new AbortController();
        const t = setTimeout(() => ac.abort(), REQUEST_TIMEOUT_MS);
        await fetch(url, { method: "DELETE", headers: h, signal: ac.signal }).then((r) => r.text()).catch(() => {});
        clearTimeout(t);
      };
    } else {
      // 2026-07-28 is stateless: every request carries the protocol version, the client's identity and
      // capabilities in its _meta, and the method (and the tool's name) in headers.
      send = (method, params) => {
        const h = { "MCP-Protocol-Version": rev, "Mcp-Method": method, ...(params?.name ? { "Mcp-Name": params.name } : {}) };
        const meta = { "io.modelcontextprotocol/protocolVersion": rev, "io.modelcontextprotocol/clientInfo": clientInfo, "io.modelcontextprotocol/clientCapabilities": {} };
        return rpc(url, { jsonrpc: "2.0", id: ++id, method, params: { ...params, _meta: meta } }, h);
      };
    }
    const list = await send("tools/list", {});
    out.listed = list.msg?.result?.tools ? list.msg.result.tools.map((t) => t.name).sort() : null;
    out.declared = summarizeCall(await send("tools/call", spec.declared));
    out.left_out = summarizeCall(await send("tools/call", spec.leftOut));
    await close();
  } catch (e) {
    out.error = e.message;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// The servers: what each is (for results.json), how it runs alone over HTTP, and the argv the proxy starts
// it with over stdio.

function packageVersion(dir) {
  return JSON.parse(fs.readFileSync(path.join(dir, "package.json"), "utf8")).version;
}

function locate(id) {
  if (id === "fixture") {
    const sdk = path.join(HERE, "node_modules", "@modelcontextprotocol", "server");
    if (!fs.existsSync(sdk)) throw new Harness("the fixture's SDK is not installed: run `bash host/tests/mcp/conformance/setup`");
    return { label: "host/tests/mcp/conformance/fixture/server.mjs", sdk: `@modelcontextprotocol/server@${packageVersion(sdk)}`, stdio: [process.execPath, FIXTURE] };
  }
  const dir = path.join(MCP, "node_modules", "@modelcontextprotocol", "server-everything");
  const entry = path.join(dir, "dist", "index.js");
  if (!fs.existsSync(entry)) throw new Harness("server-everything is not installed: run `bash host/tests/mcp/conformance/setup`");
  return { label: `@modelcontextprotocol/server-everything@${packageVersion(dir)}`, entry, stdio: [path.join(MCP, "node_modules", ".bin", "mcp-server-everything")] };
}

class Harness extends Error {}

async function startDirect(id, work, tag) {
  const log = path.join(work, `${tag}.server.log`);
  if (id === "fixture") {
    // Port 0: the fixture takes a free port and says which.
    const child = start(process.execPath, [FIXTURE, "--http", "0"], { cwd: work, log });
    const w = await waitLine(child, /^fixture: listening on (http:\/\/127\.0\.0\.1:\d+\/mcp)/, START_TIMEOUT_MS);
    if (w.match) return { child, url: w.match[1] };
    await stop(child);
    throw new Harness(`the fixture did not listen ${w.timedOut ? `within ${START_TIMEOUT_MS / 1000} s` : `(exit ${w.exited?.code ?? w.exited?.signal})`}:\n  ${child.stderrLines.slice(-5).join("\n  ")}`);
  }
  const { entry } = locate(id);
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = start(process.execPath, [entry, "streamableHttp"], { cwd: work, env: { ...process.env, PORT: String(port) }, log });
    const w = await waitLine(child, /listening on port|already in use/, START_TIMEOUT_MS);
    if (w.match && /listening/.test(w.match[0])) return { child, url: `http://127.0.0.1:${port}/mcp` };
    await stop(child);
    if (w.timedOut) throw new Harness(`server-everything did not listen within ${START_TIMEOUT_MS / 1000} s`);
  }
  throw new Harness("server-everything found no free port");
}

async function startProxy(bin, id, target, work, tag) {
  const runs = path.join(work, tag, "runs");
  fs.mkdirSync(runs, { recursive: true });
  const runbook = runbookRef(id, target);
  // Everything but tools passes through (none of it `--block`ed), recorded in each run's traffic.ndjson.
  const args = ["run", runbook, "--registry", path.join(HERE, "registry"), "--runs", runs, "--listen", "127.0.0.1:0", "--", ...locate(id).stdio];
  const child = start(bin, args, { cwd: path.join(work, tag), log: path.join(work, `${tag}.proxy.log`) });
  const w = await waitLine(child, /^runbook-host run: listening on (http:\/\/127\.0\.0\.1:\d+\/mcp)/, START_TIMEOUT_MS);
  if (!w.match) {
    await stop(child);
    const tail = child.stderrLines.slice(-5).join("\n  ");
    throw new Harness(
      `the proxy (${runbook}) did not say it listens ${w.timedOut ? `within ${START_TIMEOUT_MS / 1000} s` : `(exit ${w.exited?.code ?? w.exited?.signal})`}:\n  ${tail}\n` +
        "  (needs `runbook-host run --listen`; --direct-only runs the direct half alone)",
    );
  }
  return { child, url: w.match[1], runs };
}

// ---------------------------------------------------------------------------------------------------------
// One revision, one server, one target.

async function runTarget(rev, id, target, scenarios, bin, work) {
  const tag = `${rev}-${id}-${target}`;
  const t0 = Date.now();
  const peer = target === "direct" ? await startDirect(id, work, tag) : await startProxy(bin, id, target, work, tag);
  const res = { scenarios: {}, probe: null, bundles: null, proxy_exit: null, seconds: 0 };
  try {
    for (const s of scenarios) {
      const before = peer.runs ? snapshot(peer.runs) : null;
      const r = await runScenario(rev, s.name, peer.url, work, tag);
      if (peer.runs) r.calls = countCalls(callsSince(peer.runs, before));
      res.scenarios[s.name] = r;
      process.stderr.write(`  ${tag.padEnd(30)} ${s.name.padEnd(48)} ${r.status}\n`);
    }
    const before = peer.runs ? snapshot(peer.runs) : null;
    res.probe = await probe(rev, peer.url, SERVERS[id].probe);
    if (peer.runs) res.probe.calls = countCalls(callsSince(peer.runs, before));
  } finally {
    const early = peer.child.exitCode !== null || peer.child.signalCode !== null;
    const e = await stop(peer.child);
    if (early) res.exited_early = e.code ?? e.signal;
    if (peer.runs) res.proxy_exit = e.killed ? "killed" : e.code ?? e.signal;
  }
  if (peer.runs) {
    const v = await verifyAll(bin, peer.runs, work);
    res.bundles = { runs: v.length, verified: v.filter((x) => x.ok).length, failed: v.filter((x) => !x.ok).map((x) => x.run) };
    res.all_calls = countCalls(callsSince(peer.runs, new Map()));
  }
  res.seconds = Math.round((Date.now() - t0) / 100) / 10;
  return res;
}

// ---------------------------------------------------------------------------------------------------------
// Judging: what must hold, given a server's three runs of a revision.

// Scenarios a server passes alone that the proxy is known to fail, each with why (issue 31). A listed
// scenario that fails through the proxy is reported, not counted as a regression; one that passes is a
// problem (remove it here), so the list never outlives the gap.
const KNOWN_GAPS = {};

function judge(rev, id, scenarios, runs, declaredSome, serverTools) {
  const { title, runbooks, probe: spec, capabilityListed } = SERVERS[id];
  const at = (t) => `${rev} ${title}${t ? ` ${t}` : ""}`;
  const problems = [];
  const { direct, all, some } = runs;
  // The -all runbook declares every tool the server lists (to this client: the capability-dependent ones
  // only show to clients that declare the capability; the runbook declares them all the same).
  for (const t of direct?.probe?.listed ?? []) {
    if (capabilityListed?.test(t)) continue;
    if (!serverTools.has(t)) problems.push(`${at()}: the server lists ${t}, which runbooks/${runbooks.all}.yaml does not declare`);
  }
  for (const [t, x] of Object.entries(runs)) {
    if (x && x.exited_early !== undefined) problems.push(`${at(t)}: ${t === "direct" ? "the server" : "the proxy"} exited during the run (${x.exited_early})`);
  }
  const regressions = [];
  const knownGaps = [];
  const leftOutTouched = [];
  if (all) {
    // Everything but tools passes through (nothing is `--block`ed): nothing is withheld by design.
    const gaps = KNOWN_GAPS[`${rev}/${id}`] ?? {};
    for (const s of scenarios) {
      if (direct?.scenarios[s.name]?.status !== "pass") continue;
      const passes = all.scenarios[s.name]?.status === "pass";
      if (gaps[s.name] && passes) problems.push(`${at()}: ${s.name} passes through the proxy now: remove it from KNOWN_GAPS in run.mjs`);
      else if (gaps[s.name]) knownGaps.push({ scenario: s.name, why: gaps[s.name] });
      else if (!passes) regressions.push(s.name);
    }
    for (const n of regressions) {
      const why = (all.scenarios[n]?.why ?? []).map((w) => `\n      ${w.slice(0, 400)}`).join("");
      problems.push(`${at()}: ${n} passes against the server alone but is ${all.scenarios[n]?.status} through the proxy with every tool declared${why}`);
    }
    // Every call of a tool the server lists flows under the -all runbook.
    for (const c of all.all_calls ?? []) {
      if (c.decision !== "allow" && c.deviation !== "undeclared-tool") problems.push(`${at()}: under ${runbooks.all}, ${c.tool} was ${c.decision} (${c.deviation})`);
    }
    const p = all.probe;
    if (p.error) problems.push(`${at("all")}: the probe failed: ${p.error}`);
    else {
      if (!p.declared?.ok || p.declared.is_error) problems.push(`${at("all")}: ${spec.declared.name} did not pass: ${JSON.stringify(p.declared)}`);
      if (!p.left_out?.ok || p.left_out.is_error) problems.push(`${at("all")}: ${spec.leftOut.name} did not pass: ${JSON.stringify(p.left_out)}`);
      for (const t of [spec.declared.name, spec.leftOut.name]) if (!p.listed?.includes(t)) problems.push(`${at("all")}: tools/list does not show ${t}`);
      const hidden = (direct?.probe?.listed ?? []).filter((t) => p.listed && !p.listed.includes(t));
      if (hidden.length) problems.push(`${at("all")}: tools/list through the proxy hides ${hidden.join(", ")}, which the server lists alone`);
    }
    if (all.bundles.verified !== all.bundles.runs || all.bundles.runs === 0) problems.push(`${at("all")}: ${all.bundles.verified} of ${all.bundles.runs} bundle(s) verify`);
  }
  if (some) {
    // The scenarios that call a tool the -some runbook leaves out (a call the -all runbook let through):
    // each is blocked there with undeclared-tool and recorded.
    for (const s of scenarios) {
      const touched = (all?.scenarios[s.name]?.calls ?? []).filter((c) => c.decision === "allow" && !declaredSome.has(c.tool)).map((c) => c.tool);
      if (!touched.length) continue;
      const r = some.scenarios[s.name];
      const blocked = new Set((r?.calls ?? []).filter((c) => c.decision === "deny" && c.deviation === "undeclared-tool").map((c) => c.tool));
      const missing = [...new Set(touched)].filter((t) => !blocked.has(t));
      leftOutTouched.push({ scenario: s.name, tools: [...new Set(touched)].sort(), status: r?.status ?? null, blocked_and_recorded: !missing.length });
      if (missing.length) problems.push(`${at("some")}: ${s.name} called ${missing.join(", ")} without a recorded undeclared-tool block`);
    }
    // Only those may differ from the run with the -all runbook.
    const touchedNames = new Set(leftOutTouched.map((x) => x.scenario));
    for (const s of scenarios) {
      const [a, b] = [all?.scenarios[s.name]?.status, some.scenarios[s.name]?.status];
      if (all && a !== b && !touchedNames.has(s.name)) problems.push(`${at("some")}: ${s.name} is ${b}, ${a} with ${runbooks.all}, though it calls no tool ${runbooks.some} leaves out`);
    }
    for (const c of some.all_calls ?? []) {
      if (declaredSome.has(c.tool) && c.decision !== "allow") problems.push(`${at("some")}: declared ${c.tool} was ${c.decision} (${c.deviation})`);
      if (!declaredSome.has(c.tool) && !(c.decision === "deny" && c.deviation === "undeclared-tool")) problems.push(`${at("some")}: left-out ${c.tool} was ${c.decision} (${c.deviation})`);
    }
    const p = some.probe;
    if (p.error) problems.push(`${at("some")}: the probe failed: ${p.error}`);
    else {
      if (!p.declared?.ok || p.declared.is_error) problems.push(`${at("some")}: ${spec.declared.name} did not pass: ${JSON.stringify(p.declared)}`);
      if (!(p.left_out?.ok && p.left_out.is_error && /^undeclared-tool\b/.test(p.left_out.text ?? ""))) {
        problems.push(`${at("some")}: ${spec.leftOut.name} was not blocked with undeclared-tool: ${JSON.stringify(p.left_out)}`);
      }
      const recorded = (p.calls ?? []).some((c) => c.tool === spec.leftOut.name && c.decision === "deny" && c.deviation === "undeclared-tool");
      if (!recorded) problems.push(`${at("some")}: the bundle does not hold the blocked ${spec.leftOut.name} call`);
      if (!p.listed?.includes(spec.declared.name)) problems.push(`${at("some")}: tools/list does not show ${spec.declared.name}`);
      if (p.listed?.includes(spec.leftOut.name)) problems.push(`${at("some")}: tools/list shows the left-out ${spec.leftOut.name}`);
    }
    if (some.bundles.verified !== some.bundles.runs || some.bundles.runs === 0) problems.push(`${at("some")}: ${some.bundles.verified} of ${some.bundles.runs} bundle(s) verify`);
  }
  return { problems, regressions, knownGaps, leftOutTouched };
}

function declaredTools(file) {
  // The capabilities' tools of a runbook in this folder's flow-style YAML (`- {name: X, tool: Y, ...}`).
  const text = fs.readFileSync(file, "utf8");
  return new Set([...text.matchAll(/^\s+- \{name: [^,]+, tool: ([^,}]+)/gm)].map((m) => m[1].trim()));
}

// ---------------------------------------------------------------------------------------------------------
// Results and the table.

function totals(scenarios, id, target) {
  const t = { scenarios: { pass: 0, fail: 0, other: 0 }, checks: { passed: 0, failed: 0 } };
  for (const s of scenarios) {
    const r = s[id]?.[target];
    if (!r) return null;
    if (r.status === "pass") t.scenarios.pass++;
    else if (r.status === "fail") t.scenarios.fail++;
    else t.scenarios.other++;
    t.checks.passed += r.checks.passed;
    t.checks.failed += r.checks.failed;
  }
  return t;
}

function cell(r) {
  if (!r) return "not run";
  return { pass: "✓", fail: "✗", skipped: "skipped", error: "error", timeout: "timeout" }[r.status] ?? r.status;
}

function probeCell(p, spec) {
  if (!p) return "not run";
  if (p.error) return "probe failed (no session)";
  const say = (c) => (!c?.ok ? "no answer" : !c.is_error ? "passes" : `error (${(c.text ?? "").split(":")[0]})`);
  return `${spec.declared.name} ${say(p.declared)}, ${spec.leftOut.name} ${say(p.left_out)}`;
}

/**
 * Blocked calls by deviation; calls of tools the server does not have (the suite's `test_*` tools for
 * server-everything, the Tasks extension's for the fixture) counted, not named.
 */
function describeBlocked(calls, serverTools) {
  const by = new Map();
  for (const c of calls) {
    const k = `${c.decision}${c.deviation ? ` ${c.deviation}` : ""}`;
    if (!by.has(k)) by.set(k, { named: [], other: 0 });
    const g = by.get(k);
    if (!serverTools.has(c.tool)) g.other += c.count;
    else g.named.push(`${c.tool} ×${c.count}`);
  }
  return [...by.entries()]
    .map(([k, g]) => `${k}: ${[...g.named, ...(g.other ? [`${g.other} calls of tools the server does not have`] : [])].join(", ")}`)
    .join("; ");
}

/** One revision's scenarios: a column per server and target, the fixture's first. */
function scenarioTable(r) {
  const ids = Object.keys(SERVERS);
  const head = ["scenario", ...ids.flatMap((id) => TARGETS.map((t) => `${SERVERS[id].title} ${TARGET_TITLE[t]}`))];
  const lines = [`| ${head.join(" | ")} |`, `| ${head.map(() => "---").join(" | ")} |`];
  for (const s of r.scenarios) {
    const name = `\`${s.name}\`${s.scored ? "" : ` (${s.note ?? "not scored"}, not scored)`}`;
    lines.push(`| ${name} | ${ids.flatMap((id) => TARGETS.map((t) => cell(s[id]?.[t]))).join(" | ")} |`);
  }
  const tot = ["**scenarios passed**"];
  const chk = ["checks passed / failed"];
  for (const id of ids) {
    for (const t of TARGETS) {
      const x = r.servers[id]?.totals[t];
      tot.push(x ? `**${x.scenarios.pass} / ${r.scenarios.length}**` : "not run");
      chk.push(x ? `${x.checks.passed} / ${x.checks.failed}` : "not run");
    }
  }
  lines.push(`| ${tot.join(" | ")} |`, `| ${chk.join(" | ")} |`);
  return lines.join("\n");
}

/** Every revision, server and target: the calls the bundles hold, the probe, the bundles verified. */
function callsTable(results) {
  const lines = [
    "| revision | server | target | calls let through (from the bundles) | calls blocked and recorded | probe: a declared and a left-out call | bundles verified |",
    "| --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of results.revisions) {
    for (const id of Object.keys(SERVERS)) {
      for (const t of TARGETS) {
        const x = r.servers[id]?.runs[t];
        let through = "(no proxy)";
        let blocked = "(no proxy)";
        if (!x) through = blocked = "not run";
        else if (x.calls) {
          through = x.calls.filter((c) => c.decision === "allow").map((c) => `${c.tool} ×${c.count}`).join(", ") || "none";
          // The server's tools are the ones its -all runbook declares (judge checks its listing against them).
          blocked = describeBlocked(x.calls.filter((c) => c.decision !== "allow"), new Set(results.servers[id].declared.all)) || "none";
        }
        const b = !x ? "not run" : x.bundles ? `${x.bundles.verified} / ${x.bundles.runs}` : "(no proxy)";
        lines.push(`| ${r.revision} | ${SERVERS[id].title} | ${TARGET_TITLE[t]} | ${through} | ${blocked} | ${probeCell(x?.probe, SERVERS[id].probe)} | ${b} |`);
      }
    }
  }
  return lines.join("\n");
}

/** Prose wrapped at 110 characters, as the README is; lines after the first start with `indent`. */
function wrap(text, indent = "") {
  const lines = [];
  let line = "";
  for (const w of text.split(/\s+/)) {
    if (line && line.length + 1 + w.length > 110) lines.push(line), (line = `${indent}${w}`);
    else line = line ? `${line} ${w}` : w;
  }
  if (line) lines.push(line);
  return lines.join("\n");
}

function tables(results) {
  return [...results.revisions.flatMap((r) => [`${r.revision} (\`${r.suite}\`):`, "", scenarioTable(r), ""]), callsTable(results)].join("\n");
}

function tableSection(results) {
  const pins = results.revisions.map((r) => `\`${r.suite}\` for ${r.revision}`).join(", ");
  const { fixture, everything } = results.servers;
  const list = (names) => (names.length ? names.map((n) => `\`${n}\``).join(", ") : "none");
  const notes = [];
  for (const r of results.revisions) {
    for (const id of Object.keys(SERVERS)) {
      const x = r.servers[id];
      const at = `${r.revision}, ${SERVERS[id].title}`;
      if (!x) notes.push(wrap(`- ${at}: not run.`, "  "));
      else if (!x.runs.some) notes.push(wrap(`- ${at}: the proxied runs have not been recorded yet.`, "  "));
      else {
        const t = x.left_out_touched;
        notes.push(
          wrap(
            `- ${at}: scenarios that call a tool \`${SERVERS[id].runbooks.some}\` leaves out: ${
              t.length ? t.map((y) => `\`${y.scenario}\` (${y.tools.join(", ")}: ${y.blocked_and_recorded ? "blocked and recorded" : "NOT blocked"}, ${y.status})`).join(", ") : "none"
            }; regressions through the proxy with every tool declared: ${list(x.regressions)}; known gaps of the proxy (listed in run.mjs, failing through it): ${
              x.known_gaps?.length ? `${list(x.known_gaps.map((g) => g.scenario))} (${[...new Set(x.known_gaps.map((g) => g.why))].join("; ")})` : "none"
            }.`,
            "  ",
          ),
        );
      }
    }
  }
  return [
    BEGIN,
    `<!-- produced by \`host/tests/mcp/conformance/run --table\` from host/tests/mcp/conformance/results.json: do not edit by hand -->`,
    "",
    wrap(
      `The official MCP conformance suite (${pins}) against two servers: our fixture, \`${fixture.server}\` (on` +
        ` \`${fixture.sdk}\`), which implements every tool, resource and prompt the suite's server scenarios call, and the reference server` +
        ` \`${everything.server}\`, which is not the suite's fixture. Each directly (its own Streamable HTTP mode), then` +
        " through `runbook-host run --listen` (the server over stdio) with a runbook declaring every tool the server lists" +
        " (`fixture-all`, `everything-all`) and with one declaring a part of them (`fixture-some`, `everything-some`). ✓" +
        " every check of the scenario passed, ✗ one failed; each server's direct column is the baseline the proxy must match.",
    ),
    "",
    tables(results),
    "",
    ...notes,
    END,
  ].join("\n");
}

/** JSON with a value on one line when it fits in about 120 characters, else one member a line. */
function pretty(v, indent = "") {
  const flat = JSON.stringify(v);
  if (flat.length + indent.length <= 120 || v === null || typeof v !== "object") return flat;
  const inner = indent + "  ";
  if (Array.isArray(v)) return `[\n${v.map((x) => inner + pretty(x, inner)).join(",\n")}\n${indent}]`;
  return `{\n${Object.entries(v).map(([k, x]) => `${inner}${JSON.stringify(k)}: ${pretty(x, inner)}`).join(",\n")}\n${indent}}`;
}

function writeReadme(results) {
  const text = fs.readFileSync(README, "utf8");
  const a = text.indexOf(BEGIN);
  const b = text.indexOf(END);
  if (a < 0 || b < a) throw new Harness(`${path.relative(REPO, README)} has no ${BEGIN} ... ${END} section`);
  const next = text.slice(0, a) + tableSection(results) + text.slice(b + END.length);
  if (next !== text) fs.writeFileSync(README, next);
  return next !== text;
}

// ---------------------------------------------------------------------------------------------------------

function binary() {
  if (process.env.RUNBOOK_HOST) return path.resolve(process.env.RUNBOOK_HOST);
  const own = path.join(REPO, "target", "release", "runbook-host");
  if (fs.existsSync(own) || !process.env.CARGO_TARGET_DIR) return own;
  return path.join(path.resolve(REPO, process.env.CARGO_TARGET_DIR), "release", "runbook-host");
}

function registryMatchesRunbooks(ids) {
  for (const name of ids.flatMap((id) => Object.values(SERVERS[id].runbooks))) {
    const a = fs.readFileSync(path.join(HERE, "runbooks", `${name}.yaml`));
    const b = fs.readFileSync(path.join(HERE, "registry", name, "1.0.0", "runbook.yaml"));
    if (!a.equals(b)) throw new Harness(`registry/${name}/1.0.0/runbook.yaml differs from runbooks/${name}.yaml: run \`runbook-host registry add runbooks/${name}.yaml --registry registry\``);
  }
}

function parseArgs(argv) {
  const o = { revisions: [], servers: [], directOnly: false, table: false, out: path.join(HERE, "results.json"), keep: !!process.env.RUNBOOK_KEEP_TEST_DIRS };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--table") o.table = true;
    else if (a === "--direct-only") o.directOnly = true;
    else if (a === "--keep") o.keep = true;
    else if (a === "--out") o.out = path.resolve(argv[++i] ?? "");
    else if (a === "--revision") o.revisions.push(argv[++i]);
    else if (a === "--server") o.servers.push(argv[++i]);
    else if (a === "-h" || a === "--help") {
      const lines = fs.readFileSync(fileURLToPath(import.meta.url), "utf8").split("\n");
      console.log(lines.slice(0, lines.findIndex((l) => !l.startsWith("//"))).map((l) => l.slice(3)).join("\n"));
      process.exit(0);
    } else throw new Harness(`unknown argument ${a}`);
  }
  for (const r of o.revisions) if (!REVISIONS[r]) throw new Harness(`unknown revision ${r} (${Object.keys(REVISIONS).join(", ")})`);
  for (const id of o.servers) if (!SERVERS[id]) throw new Harness(`unknown server ${id} (${Object.keys(SERVERS).join(", ")})`);
  if (!o.revisions.length) o.revisions = Object.keys(REVISIONS);
  // In the order of SERVERS, whatever the order asked.
  o.servers = Object.keys(SERVERS).filter((id) => !o.servers.length || o.servers.includes(id));
  return o;
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  if (o.table) {
    const results = JSON.parse(fs.readFileSync(o.out, "utf8"));
    if (results.schema !== RESULTS_SCHEMA) throw new Harness(`${o.out} is ${results.schema}, not ${RESULTS_SCHEMA}: run ./run first`);
    const changed = writeReadme(results);
    console.log(`${path.relative(REPO, README)} ${changed ? "rewritten" : "already up to date"} from ${path.relative(process.cwd(), o.out) || o.out}`);
    return 0;
  }
  const major = Number(process.versions.node.split(".")[0]);
  if (major < 22) throw new Harness(`the suite needs Node 22 or later (this is ${process.version}): run it through ./run`);
  for (const rev of o.revisions) if (!fs.existsSync(suiteBin(rev))) throw new Harness("the suite is not installed: run `bash host/tests/mcp/conformance/setup`");
  const bin = binary();
  if (!o.directOnly) {
    if (!fs.existsSync(bin)) throw new Harness(`no runbook-host at ${bin} (set RUNBOOK_HOST, or --direct-only)`);
    registryMatchesRunbooks(o.servers);
  }
  const results = { schema: RESULTS_SCHEMA, servers: {}, revisions: [] };
  const declared = {};
  for (const id of Object.keys(SERVERS)) {
    const [all, some] = ["all", "some"].map((t) => declaredTools(path.join(HERE, "runbooks", `${SERVERS[id].runbooks[t]}.yaml`)));
    declared[id] = { all, some };
    const { label, sdk } = locate(id);
    results.servers[id] = { server: label, ...(sdk && { sdk }), declared: { all: [...all].sort(), some: [...some].sort() } };
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), "rh-mcp-conformance-"));
  workDir = work;
  keepWork = o.keep;
  const deadline = setTimeout(() => {
    console.error(`conformance: the whole run exceeded ${TOTAL_TIMEOUT_MS / 60_000} minutes; stopping`);
    killAll();
    process.exit(2);
  }, TOTAL_TIMEOUT_MS);
  deadline.unref();

  const problems = [];
  const timing = [];
  try {
    for (const rev of o.revisions) {
      const scenarios = await plan(rev);
      const entry = {
        revision: rev,
        suite: `@modelcontextprotocol/conformance@${suiteVersion(rev)}`,
        scenarios: scenarios.map((s) => ({ name: s.name, scored: s.scored, note: s.note })),
        servers: {},
      };
      for (const id of Object.keys(SERVERS)) {
        if (!o.servers.includes(id)) {
          for (const row of entry.scenarios) row[id] = null;
          entry.servers[id] = null;
          continue;
        }
        const runs = {};
        for (const target of TARGETS) {
          if (target !== "direct" && o.directOnly) {
            runs[target] = null;
            continue;
          }
          runs[target] = await runTarget(rev, id, target, scenarios, bin, work);
          timing.push(`${rev} ${id} ${target}: ${runs[target].seconds} s`);
        }
        const j = judge(rev, id, scenarios, runs, declared[id].some, declared[id].all);
        problems.push(...j.problems);
        for (const row of entry.scenarios) {
          row[id] = {};
          for (const t of TARGETS) row[id][t] = runs[t] ? runs[t].scenarios[row.name] ?? { status: "missing", checks: { passed: 0, failed: 0 } } : null;
        }
        const x = { totals: {}, runs: {}, regressions: j.regressions, known_gaps: j.knownGaps, left_out_touched: j.leftOutTouched };
        for (const t of TARGETS) {
          x.totals[t] = runs[t] ? totals(entry.scenarios, id, t) : null;
          const r = runs[t];
          x.runs[t] = r && {
            runbook: t === "direct" ? null : runbookRef(id, t),
            calls: r.all_calls ?? null,
            probe: r.probe,
            bundles: r.bundles ? { runs: r.bundles.runs, verified: r.bundles.verified } : null,
            proxy_exit: r.proxy_exit,
          };
        }
        entry.servers[id] = x;
      }
      results.revisions.push(entry);
    }
  } finally {
    killAll();
  }
  fs.writeFileSync(o.out, pretty(results) + "\n");
  console.log(tables(results));
  console.log("");
  console.log(`results: ${path.relative(process.cwd(), o.out) || o.out}; time: ${timing.join(", ")}`);
  if (problems.length) {
    console.error(`\nconformance: ${problems.length} problem(s):`);
    for (const p of problems) console.error(`  - ${p}`);
    return 1;
  }
  console.error(`conformance: every check held${o.directOnly ? " (direct half only: the proxied half was not run)" : ""}`);
  return 0;
}

main().then(
  (code) => {
    killAll();
    process.exit(code);
  },
  (e) => {
    console.error(`conformance: ${e instanceof Harness ? e.message : e.stack ?? e}`);
    killAll();
    process.exit(2);
  },
);
