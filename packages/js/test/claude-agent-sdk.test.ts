// Types only (checked by `tsc -p test/tsconfig.json`, never run): the adapter's hooks fit the `hooks`
// option of @anthropic-ai/claude-agent-sdk's query() as they are, and the README's lines type-check.
import { query, type HookCallbackMatcher, type HookEvent, type Options } from '@anthropic-ai/claude-agent-sdk';
import { load } from '../src/node.js';
import { createRun, endRun, runbookHooks, RunbookHooks, type ApprovalAnswer, type ApprovalRequest } from '../src/claude-agent-sdk.js';

export async function example(): Promise<void> {
  const approve = async (request: ApprovalRequest): Promise<ApprovalAnswer> => ({ approver: 'alice', granted: request.tool === 'Bash' });
  const run = await createRun(await load(), { document: 'runbook.yaml', agent: 'deploy-bot' });
  const options: Options = { hooks: runbookHooks(run, { approve }), allowedTools: ['Bash'] };
  for await (const message of query({ prompt: 'Say hello.', options })) void message;
  const outcome: 'completed' | 'incomplete' | 'refused' | 'failed' | 'aborted' = endRun(run);
  const matchers: Partial<Record<HookEvent, HookCallbackMatcher[]>> = new RunbookHooks(run, { keepWorking: true }).matchers();
  void outcome;
  void matchers;
}
