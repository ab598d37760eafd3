// The component this package was built for: `runbook-host module --sha256` of the policy module it ships
// (policy.wasm beside package.json). The build refuses to transpile any other bytes, and `load` refuses to
// run any other bytes: the JavaScript glue in dist/ was generated from exactly these, and a changed byte
// is a different policy.
//
// To move to a new component: copy the file `runbook-host module --out FILE` writes to policy.wasm, put its
// sha256 here, run `npm run build` (the Python package records the same value).
export const COMPONENT_SHA256 = 'dbe07e281bfaef62c13302487d7a29302b88f685c9deccb7559312be877cc0e2';

/** The WIT interface the glue binds (`wit/policy.wit`). */
export const INTERFACE = 'runbook:policy/policy@1.2.0';
