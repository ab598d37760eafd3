// Type tests (`tsc -p test/tsconfig.json`, part of `npm test`): the public API as a TypeScript user sees it.
// Each `@ts-expect-error` must be an error, so a type that became too loose fails the build.

import { load, verify, Run, Session, PolicyError, ComponentMismatch, RunTampered, type Pin, type Replayed, type Verification, type Decision, type Effect, type Event, type Leaving, type RunState, type Wit, type Answer, type Gated, type ApprovalRequest } from 'runbook-policy';
import * as browser from 'runbook-policy/browser';
import { Run as RunOnly, HOST_NAME } from 'runbook-policy/run';

export async function example(): Promise<string | null> {
  const policy = await load({ path: 'policy.wasm' });
  const sha: string = policy.sha256;
  const report = policy.lint(new Uint8Array([1]));
  const level: 'P0' | 'P1' | 'P2' | null = report.structure;
  const session = policy.session('runbook_id: x\n', { instance: 'shared' });
  const start: Event = { type: 'start', runId: 'r', profile: 'R2', allowlist: ['*'], riskCeiling: 'destructive', coverage: ['shell'], agent: 'a' };
  const d: Decision = session.handle(start, 0);
  const kind: 'allow' | 'deny' | 'needs-approval' | 'needs-verdict' | 'halt' = d.kind;
  const rec = session.feed({ type: 'invoke', tool: 't', arguments: { a: [1, 'x', null] }, callId: 'c' }, 1n, sha);
  const state: RunState = rec.state;
  const deadline: number | null = state.nextDeadline;
  const [line, link]: [string, string] = session.replayLine('{}', rec.link);
  const restored: Session = Session.restore(policy, 'x', session.snapshot());
  restored.close();
  // @ts-expect-error: profiles are the wire codes
  session.handle({ type: 'start', runId: 'r', profile: 'r2', allowlist: [], riskCeiling: 'mutating', coverage: 'complete', agent: 'a' }, 0);
  // @ts-expect-error: an unknown event type
  session.handle({ type: 'launch' }, 0);
  // @ts-expect-error: arguments are JSON
  session.handle({ type: 'invoke', tool: 't', arguments: () => 1 }, 0);
  const reason: Wit.Reason | null = d.reason;
  const run = await Run.create(policy, { document: 'runbook.yaml', agent: 'a', profile: 'R1', riskCeiling: 'read-only', coverage: 'complete' });
  const a: Answer = run.invoke('Bash', { command: 'ls' }, { callId: 'x' });
  if (a.kind === 'needs-approval' && a.callSha256 !== null) run.approval('alice', true, { callSha256: a.callSha256 });
  // The gated call the adapters share: the request carries the adapter's own fields.
  const gated: Gated = await run.invokeWithApproval('Bash', { command: 'ls' }, {
    callId: 'x',
    approve: async (r: ApprovalRequest<{ toolUseId: string | null }>, { signal }) => ({ approver: r.toolUseId ?? r.runId, granted: !signal.aborted }),
    approvalTimeout: 300,
    signal: new AbortController().signal,
    request: { toolUseId: 'x' },
  });
  const held: Answer | null = gated.allowed ? null : gated.approval;
  void [held, gated.answer.callSha256, gated.problem?.length, gated.message];
  // @ts-expect-error: an approval callback answers {approver, granted}
  await run.invokeWithApproval('Bash', {}, { approve: () => true });
  // @ts-expect-error: the request has only the fields the adapter gave
  await run.invokeWithApproval('Bash', {}, { approve: (r) => ({ approver: r.toolCallId, granted: true }), request: { toolUseId: 'x' } });
  // @ts-expect-error: the timeout is in seconds, a number
  await run.invokeWithApproval('Bash', {}, { approvalTimeout: '5' });
  const malformed: Answer = run.feedMalformed('malformed hook input (no `tool_name` string): {"tool_input":{}}');
  void malformed;
  const raw: Answer = run.feedLine('{"type":"tick","at":5}');
  const leaving: Leaving = run.leaving(0, false);
  if (leaving.finalOutput) run.finalOutput();
  session.setGuard(['.runbook/runs']);
  const record: string = rec.recordLine;
  const effects: Effect[] = policy.bundleChange('{}', { shadow: true });
  const op: 'create-dir' | 'write' | 'append' | 'sign' = effects[0].op;
  const bytes: Uint8Array = effects[0].bytes;
  void [raw, record, op, bytes];
  const fixed = await Run.create(policy, {
    document: 'runbook.yaml', agent: 'a', profile: 'R1', riskCeiling: 'read-only', coverage: 'complete',
    clock: () => 1796169600000, host: { name: 'runbook-policy-js', version: '0' }, git: { status: 'clean', total: 0 },
  });
  void fixed;
  // @ts-expect-error: the clock gives Unix milliseconds
  await RunOnly.create(policy, { document: 'runbook.yaml', agent: 'a', profile: 'R1', riskCeiling: 'read-only', coverage: 'complete', clock: () => 'now' });
  // @ts-expect-error: the claim needs a risk ceiling
  await RunOnly.create(policy, { document: 'runbook.yaml', agent: 'a', profile: 'R1', coverage: 'complete' });
  const outcome: 'completed' | 'incomplete' | 'refused' | 'failed' | 'aborted' | null = run.end('client-closed');
  const verified: Verification = await verify(run.dir, { policy });
  const place: string | undefined = verified.failure?.place;
  const checks: readonly string[] = policy.verifyBundle([['run.json', new Uint8Array()], ['sub', 2], ['link', null]], policy.sha256, null).checks;
  void [place, checks];
  const unaltered: boolean = policy.verifyBundle([['run.json', new Uint8Array()]], policy.sha256, null, { moduleResult: true }).receiptSigned;
  void unaltered;
  // @ts-expect-error options are {moduleResult?: boolean}
  policy.verifyBundle([['run.json', new Uint8Array()]], policy.sha256, null, { moduleResult: 'yes' });
  // @ts-expect-error: an entry is a file's bytes, a directory's entry count or null
  policy.verifyBundle([['run.json', 'text']], policy.sha256);
  // @ts-expect-error: verify needs the policy
  await verify(run.dir);
  const pin: Pin = run.pin;
  const resumed: Run = Run.resume(policy, run.runId, { t0: run.t0, pin, runsRoot: '.runbook/runs', clock: Date.now });
  const first: Answer | null = resumed.start;
  const replayed: Replayed = policy.session('x').replayEvents(new Uint8Array(), pin.chainH0);
  void [first, replayed.head, replayed.events + replayed.lastAt];
  // @ts-expect-error: resume needs the run's start (t0)
  RunOnly.resume(policy, run.runId, { pin });
  try {
    Run.resume(policy, run.runId, { t0: 0 });
  } catch (e) {
    if (e instanceof RunTampered && e.code === 'run-tampered') return `${e.place}: ${e.detail}`;
  }
  try {
    await browser.load({ url: 'policy.wasm' });
  } catch (e) {
    if (e instanceof ComponentMismatch) return e.actual;
    if (e instanceof PolicyError && e.code === 'run-broken') return HOST_NAME;
  }
  return `${level}${kind}${deadline}${line}${link}${reason}${outcome}`;
}
