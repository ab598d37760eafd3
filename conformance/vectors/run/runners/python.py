#!/usr/bin/env python3
"""Whole-run vector runner for the Python package (conformance/vectors/run/README.md).

    python3 conformance/vectors/run/runners/python.py SCRIPT_DIR OUT_DIR

Drives the script of SCRIPT_DIR through ``runbook_policy.Run`` (import it with PYTHONPATH=packages/python/src)
with ``OUT_DIR`` as the runs root and a manual clock: it reads ``t0`` when the run is created and
``t0 + at`` from each step on. The run id, the host's name and version and the git state are the
script's facts. Exits 0 when the script ran to its end (a refusal or a deny is an answer, not a failure),
1 with the reason on standard error otherwise.

The component is the package's own (``runbook_policy.load()``), or RUNBOOK_POLICY_WASM when it is set
(checked against RUNBOOK_POLICY_SHA256, else the first word of ``<wasm>.sha256``), so that a harness can
run the package with the component the Rust host embeds.
"""

import hashlib
import json
import os
import sys
from pathlib import Path


def fail(message):
    print(f"python runner: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


try:
    import runbook_policy as rp
except ImportError as e:
    fail(f"the runbook_policy package cannot be imported ({e}); set PYTHONPATH=packages/python/src")


class ManualClock:
    """The run's clock: Unix milliseconds, set by the script."""

    def __init__(self, ms):
        self.ms = ms

    def __call__(self):
        return self.ms


def load_policy():
    wasm = os.environ.get("RUNBOOK_POLICY_WASM")
    if not wasm:
        return rp.load()
    sha = os.environ.get("RUNBOOK_POLICY_SHA256")
    if not sha:
        try:
            sha = Path(wasm + ".sha256").read_text().split()[0]
        except (OSError, IndexError):
            fail(f"RUNBOOK_POLICY_WASM={wasm} but no RUNBOOK_POLICY_SHA256 and no readable {wasm}.sha256")
    return rp.load(wasm, sha)


def text(v, default=None):
    """A string field of a step as the Rust drivers read it: a string, else ``default`` (a number given as a
    call id is no call id)."""
    return v if isinstance(v, str) else default


def flag(v):
    return v if isinstance(v, bool) else False


def coverage(c):
    if c == "complete":
        return rp.COMPLETE
    if isinstance(c, dict) and isinstance(c.get("blind"), list):
        return rp.Blind(c["blind"])
    raise ValueError(f"claim.coverage {c!r}")


def swap_document(run_dir, new_document):
    """The agent's edit a `resume` step may make first: the bundle's document replaced by ``new_document``'s
    bytes, and run.json's text edited to match (the old document's sha256 replaced by the new one's)."""
    manifest = (run_dir / "run.json").read_bytes()
    name = json.loads(manifest)["artifacts"]["document"]
    old, new = (run_dir / name).read_bytes(), new_document.read_bytes()
    (run_dir / name).write_bytes(new)
    sha = lambda b: hashlib.sha256(b).hexdigest().encode()
    (run_dir / "run.json").write_bytes(manifest.replace(sha(old), sha(new)))


def resume(policy, run, r, script_dir, out_dir, t0, clock):
    """A `resume` step: this process lets the run go (unended) and a new Run resumes it from the bundle,
    with the pin the first kept (``"pin": "kept"``), another (``"another"``) or none. With ``refused``, the
    resume must be refused as tampered with that place and a reason starting with that text; None then."""
    pin = {"kept": run.pin, "another": ("0" * 64, "0" * 64)}.get(r.get("pin"))
    run_id = run.run_id
    if isinstance(r.get("swap_document"), str):
        swap_document(out_dir / run_id, script_dir / r["swap_document"])
    want = r.get("refused")
    try:
        resumed = rp.Run.resume(policy, run_id, runs_root=out_dir, t0=t0, pin=pin, clock=clock)
    except rp.RunTampered as e:
        if want and e.place == want["place"] and e.reason.startswith(want["reason"]):
            return None
        raise
    if want:
        raise ValueError(f"the resume was not refused ({want})")
    resumed.guard.needles.clear()
    return resumed


def drive(script_dir, out_dir):
    script = json.loads((script_dir / "script.json").read_text(encoding="utf-8"))
    document = script_dir / script["document"]
    facts = script["facts"]
    t0 = facts["t0"]
    if not isinstance(t0, int) or isinstance(t0, bool) or t0 < 0:
        raise ValueError("facts.t0 must be Unix milliseconds")
    clock = ManualClock(t0)
    claim = script["claim"]
    host = facts.get("host") or {}
    policy = load_policy()
    run = rp.Run.create(
        policy,
        document,
        runs_root=out_dir,
        agent=claim.get("agent", "vectors"),
        profile=claim["profile"],
        allowlist=claim.get("allowlist", []),
        risk_ceiling=claim["risk_ceiling"],
        coverage=coverage(claim["coverage"]),
        available=claim.get("available"),
        reference=facts.get("reference"),
        adapter=script.get("adapter", "library"),
        run_id=facts["run_id"],
        clock=clock,
        host=(host.get("name", ""), host.get("version", "")),
        git=facts["git"],
    )
    # The guard's needles are none in a vector (README): the session is given the empty list before the
    # first call (no path of this runner's is named in a vector, so the start claim is not affected).
    run.guard.needles.clear()
    for step in script.get("steps", []):
        if run.finished:
            break
        clock.ms = t0 + step.get("at", 0)
        if "invoke" in step:
            i = step["invoke"]
            run.invoke(text(i.get("tool"), ""), i.get("arguments"), call_id=text(i.get("call_id")), step=text(i.get("step")))
        elif "result" in step:
            r = step["result"]
            run.result(text(r.get("tool"), ""), r.get("result"), flag(r.get("is_error")), call_id=text(r.get("call_id")))
        elif "approval" in step:
            a = step["approval"]
            run.approval(text(a.get("approver"), ""), flag(a.get("granted")), step=text(a.get("step")), call_sha256=text(a.get("call_sha256")))
        elif isinstance(step.get("advance"), str):
            run.advance(step["advance"])
        elif "verdict" in step:
            v = step["verdict"]
            run.verdict(text(v.get("step"), ""), flag(v.get("pass")), text(v.get("by"), ""))
        elif "final_output" in step:
            run.final_output()
        elif "tick" in step:
            run.tick()
        elif isinstance(step.get("line"), str):
            run.feed_line(step["line"])
        elif "leave" in step:
            leave = step["leave"]
            reason, final_output = run.leaving(int(leave.get("calls_in_flight") or 0), flag(leave.get("last_call_timed_out")))
            if final_output:
                run.final_output()
            run.end(reason)
        elif isinstance(step.get("end"), str):
            run.end(step["end"])
        elif isinstance(step.get("resume"), dict):
            run = resume(policy, run, step["resume"], script_dir, out_dir, t0, clock)
            if run is None:
                return
        else:
            raise ValueError(f"script.json: a step this runner does not know: {json.dumps(step)}")


def main(argv):
    if len(argv) != 3:
        print("usage: python.py SCRIPT_DIR OUT_DIR", file=sys.stderr)
        return 2
    try:
        drive(Path(argv[1]), Path(argv[2]))
    except (rp.PolicyError, OSError, ValueError, TypeError, KeyError, LookupError) as e:
        fail(f"{type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
