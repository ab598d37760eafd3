// The Node side of benches/benches/embedders.rs: one allowed invoke on the typed path, timed in process.
//
// Reads the fixture (one JSON line: document, start line, tool, arguments, result, pairs_per_session),
// checks the decisions, says `ready`; then for each request "typed N" or "line N" it times N invokes on that
// path (`handle(event, at)` or `handleLine(text)`; one hrtime pair around each, the result fed untimed after
// it, a fresh session every pairs_per_session) and answers the total ns.
import { createInterface } from "node:readline";
import { load } from "../../packages/js/src/node.js";

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const fixture = JSON.parse((await lines.next()).value);
const policy = await load();
const doc = new TextEncoder().encode(fixture.document);
const invoke = { type: "invoke", tool: fixture.tool, arguments: fixture.arguments };
const result = { type: "result", tool: fixture.tool, result: fixture.result };

function fresh() {
  const s = policy.session(doc);
  const first = JSON.parse(s.handleLine(fixture.start));
  if (first.decision !== "allow") throw new Error(`admission: ${JSON.stringify(first)}`);
  return s;
}

let s = fresh();
const d = s.handle(invoke, 1);
const r = s.handle(result, 1);
if (d.kind !== "allow" || d.step !== "inspect" || r.kind !== "allow") {
  console.log(`unexpected decisions: ${JSON.stringify(d)} ${JSON.stringify(r)}`);
  process.exit(1);
}
const dl = JSON.parse(s.handleLine(fixture.invoke_line));
if (dl.decision !== "allow" || dl.step !== "inspect") {
  console.log(`unexpected decision line: ${JSON.stringify(dl)}`);
  process.exit(1);
}
s.handleLine(fixture.result_line);
console.log("ready");
const clock = process.hrtime.bigint;
for await (const request of { [Symbol.asyncIterator]: () => lines }) {
  const [path, count] = request.split(" ");
  let left = Number(count);
  let total = 0n;
  while (left > 0) {
    const n = Math.min(left, fixture.pairs_per_session);
    s = fresh();
    if (path === "typed") {
      for (let i = 0; i < n; i++) {
        const t = clock();
        s.handle(invoke, 1);
        total += clock() - t;
        s.handle(result, 1);
      }
    } else {
      for (let i = 0; i < n; i++) {
        const t = clock();
        s.handleLine(fixture.invoke_line);
        total += clock() - t;
        s.handleLine(fixture.result_line);
      }
    }
    left -= n;
  }
  console.log(String(total));
}
