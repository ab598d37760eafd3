// The component this package was built for: `runbook-host module --sha256` of the policy module it ships
// (policy.wasm beside package.json). The build refuses to transpile any other bytes, and `load` refuses to
// run any other bytes: the JavaScript glue in dist/ was generated from exactly these, and a changed byte
// is a different policy.
//
// To move to a new component: copy the file `runbook-host module --out FILE` writes to policy.wasm, put its
// sha256 here, run `npm run build` (the Python package records the same value).
export const COMPONENT_SHA256 = '410a26cd6ed00dd53a0f992bde5eb476d8a6a219dbc9118a57b5c27b7b1fc92c';

/** The WIT interface the glue binds (`wit/policy.wit`). */
export const INTERFACE = 'runbook:policy/policy@1.2.0';
