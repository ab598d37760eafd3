#!/usr/bin/env bash
# Checks the node and python adapters against the CLI, byte for byte: for every example document (and a few
# edge cases made here: bytes that are not UTF-8, an empty document, malformed event lines) the adapters'
# lint findings, envelope text, decision lines and report text must equal what `runbook-host lint --format
# json`, `envelope` and `replay` print. Run conformance/setup first. Prints `N passed, M failed`; exit 1 on
# any failure. Run from anywhere.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
conformance=$(cd "$here/.." && pwd)
root=$(cd "$conformance/.." && pwd)
cli=${RUNBOOK_HOST:-${CARGO_TARGET_DIR:-$root/target}/release/runbook-host}
export RUNBOOK_POLICY_WASM="$conformance/build/policy.wasm"
RUNBOOK_POLICY_SHA256=$("$cli" module --sha256)
export RUNBOOK_POLICY_SHA256
exec python3 - "$root" "$cli" \
  "node-jco=node $here/node/adapter.mjs" \
  "python-wasmtime=$conformance/build/venv/bin/python $here/python/adapter.py" <<'PY'
import base64, glob, json, os, shlex, subprocess, sys, tempfile, time

root, cli, *adapters = sys.argv[1:]
os.chdir(root)
tmp = tempfile.mkdtemp(prefix="conformance-check-")


def run_cli(*args):
    p = subprocess.run([cli, *args], capture_output=True)
    return p.returncode, p.stdout


def doc_field(data):
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


# ---- cases: (request, expected result) ----------------------------------------------------------------------
docs = sorted(glob.glob("examples/*/runbook.*"))
extra = {
    "not-utf8.yaml": b"runbook_id: x\nversion: 1\ntitle: \xff\xfe\n",
    "empty.yaml": b"",
    "array.json": b"[1, 2, 3]",
    "bom.json": b"\xef\xbb\xbf{\"runbook_id\": \"x\"}",
}
for name, data in extra.items():
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(data)
    docs.append(path)

cases = []
for path in docs:
    data = open(path, "rb").read()
    rc, out = run_cli("lint", "--format", "json", path)
    lint = json.loads(out)
    cases.append(({"op": "lint", "document": doc_field(data)},
                  {"sha256": lint["sha256"], "structure": lint["structure"], "findings": lint["findings"]},
                  f"lint {os.path.basename(os.path.dirname(path)) if path.startswith('examples') else os.path.basename(path)}"))
    rc, out = run_cli("envelope", "--format", "json", path)
    if rc == 0:
        expected = {"envelope": out.decode("utf-8"), "findings": []}
    else:
        expected = {"envelope": None, "findings": json.loads(out)["findings"]}
    cases[-1:] += [({"op": "envelope", "document": doc_field(data)}, expected, cases[-1][2].replace("lint", "envelope", 1))]

streams = [(d, e) for e in sorted(glob.glob("examples/*/events*.ndjson")) for d in glob.glob(os.path.dirname(e) + "/runbook.*")]
# Edge streams: malformed lines in the middle of a real run, a line that is valid JSON with a duplicate key.
base_doc, base_events = "examples/rotate-credentials/runbook.yaml", "examples/rotate-credentials/events.ndjson"
lines = [l for l in open(base_events, "rb").read().split(b"\n") if l.strip()]
for name, mutated in {
    "garbage-line.ndjson": lines[:2] + [b"not json"] + lines[2:],
    "duplicate-key.ndjson": lines[:1] + [b'{"type":"tick","at":5,"at":6}'] + lines[1:],
    "unicode.ndjson": lines[:1] + ['{"type":"advance","at":7,"to":"\u00e9tape-\u2603"}'.encode()] + lines[1:],
    "start-only.ndjson": lines[:1],
}.items():
    path = os.path.join(tmp, name)
    with open(path, "wb") as f:
        f.write(b"\n".join(mutated) + b"\n")
    streams.append((base_doc, path))

for doc, ev in streams:
    rc, out = run_cli("replay", doc, ev)
    out_lines = out.decode("utf-8").split("\n")
    assert out_lines[-1] == "", "the CLI's output ends with a newline"
    decisions, report = out_lines[:-2], out_lines[-2]
    events = [l.decode("utf-8") for l in open(ev, "rb").read().split(b"\n") if l.strip()]
    assert len(decisions) == len(events), (ev, len(decisions), len(events))
    cases.append(({"op": "replay", "document": doc_field(open(doc, "rb").read()), "events": events},
                  {"decisions": decisions, "report": report},
                  f"replay {os.path.basename(os.path.dirname(ev)) if ev.startswith('examples') else 'edge'}/{os.path.basename(ev)}"))

# ---- run each adapter over all cases --------------------------------------------------------------------------
passed = failed = 0
for spec in adapters:
    name, cmd = spec.split("=", 1)
    requests = [{"id": "hello", "op": "hello"}] + [dict(req, id=str(i)) for i, (req, _, _) in enumerate(cases)]
    payload = "".join(json.dumps(r) + "\n" for r in requests).encode()
    t = time.perf_counter()
    p = subprocess.run(shlex.split(cmd), input=payload, capture_output=True)
    wall = time.perf_counter() - t
    responses = [json.loads(l) for l in p.stdout.decode("utf-8").splitlines()]
    if p.returncode != 0 or len(responses) != len(requests):
        print(f"{name}: exit {p.returncode}, {len(responses)} responses for {len(requests)} requests\n{p.stderr.decode()}")
        failed += len(cases)
        continue
    hello = responses[0]
    ok_hello = hello.get("ok") and hello["result"].get("module_sha256") == os.environ["RUNBOOK_POLICY_SHA256"]
    print(f"{name}: hello {'ok' if ok_hello else 'WRONG: ' + json.dumps(hello)}; {len(requests)} requests in {wall * 1000:.0f} ms")
    for i, ((req, expected, label), resp) in enumerate(zip(cases, responses[1:])):
        problems = []
        if resp.get("id") != str(i) or not resp.get("ok"):
            problems.append(f"response {json.dumps(resp)[:300]}")
        else:
            got = resp["result"]
            for k, v in expected.items():
                if got.get(k) != v:
                    problems.append(f"{k} differs:\n      adapter: {json.dumps(got.get(k))[:400]}\n      cli:     {json.dumps(v)[:400]}")
            if "trap" in got:
                problems.append(f"trap: {got['trap']}")
        if problems:
            failed += 1
            print(f"  FAIL {label}: " + "\n    ".join(problems))
        else:
            passed += 1
    print(f"  {name}: {len(cases)} cases checked")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
