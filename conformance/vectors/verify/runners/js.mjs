#!/usr/bin/env node
// Verify-vector runner for the JS package (conformance/vectors/verify/README.md):
//
//   node conformance/vectors/verify/runners/js.mjs BUNDLE_DIR
//
// Verifies the bundle with the package's `verify` (which lists the directory and calls the module's
// `verify-bundle`) and prints the verification as one JSON object in the vectors' form, with the package's
// own component (which the harness checks is the one every implementation loads).

import { load, verify } from '../../../../packages/js/src/node.js';

const [dir] = process.argv.slice(2);
if (!dir || process.argv.length !== 3) {
  process.stderr.write('usage: node js.mjs BUNDLE_DIR\n');
  process.exit(2);
}
const policy = await load();
const v = await verify(dir, { policy });
process.stdout.write(
  `${JSON.stringify({
    checks: v.checks,
    events: v.events,
    failure: v.failure,
    outcome: v.outcome,
    reasons: v.reasons,
    receipt_signed: v.receiptSigned,
    redacted: v.redacted,
    run_id: v.runId,
    shadow: v.shadow,
    signed_answers: v.signedAnswers,
    warnings: v.warnings,
  })}\n`,
);
