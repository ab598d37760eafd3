#!/usr/bin/env python3
"""Verify-vector runner for the Python package (conformance/vectors/verify/README.md).

    python3 conformance/vectors/verify/runners/python.py BUNDLE_DIR

Verifies the bundle with ``runbook_policy.verify`` (which lists the directory and calls the module's
``verify-bundle``) and prints the verification as one JSON object in the vectors' form. The component is the
package's own (import it with PYTHONPATH=packages/python/src).
"""

import json
import sys

try:
    import runbook_policy as rp
except ImportError as e:
    print(f"python runner: the runbook_policy package cannot be imported ({e}); set PYTHONPATH=packages/python/src", file=sys.stderr)
    sys.exit(1)

if len(sys.argv) != 2:
    print("usage: python.py BUNDLE_DIR", file=sys.stderr)
    sys.exit(2)
v = rp.verify(sys.argv[1], policy=rp.load())
print(json.dumps({
    "checks": v.checks,
    "events": v.events,
    "failure": None if v.failure is None else {"place": v.failure[0], "message": v.failure[1]},
    "outcome": v.outcome,
    "reasons": [{"code": c, "message": m} for c, m in v.reasons],
    "receipt_signed": v.receipt_signed,
    "redacted": v.redacted,
    "run_id": v.run_id,
    "shadow": v.shadow,
    "signed_answers": [
        {"place": a.place, "principal": a.principal, "message": a.message, "signature": a.signature, "fingerprint": a.fingerprint}
        for a in v.signed_answers
    ],
    "warnings": v.warnings,
}))
