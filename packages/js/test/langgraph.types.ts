// Type tests of runbook-policy/langgraph (`tsc -p test/tsconfig.json`): the adapter as a TypeScript user
// sees it, with the real @langchain/core and @langchain/langgraph types. Each `@ts-expect-error` must be an
// error, so a type that became too loose fails the build.

import { tool } from '@langchain/core/tools';
import { createReactAgent, ToolNode } from '@langchain/langgraph/prebuilt';
import type { BaseChatModel } from '@langchain/core/language_models/chat_models';
import { z } from 'zod';
import { load, type Outcome } from 'runbook-policy';
import {
  ADAPTER,
  RunbookTool,
  RunbookToolNode,
  ToolBlocked,
  coverage,
  createRun,
  endRun,
  runbookTools,
  type ApprovalRequest,
  type Approver,
} from 'runbook-policy/langgraph';

export async function example(llm: BaseChatModel): Promise<Outcome> {
  const deploy = tool(async ({ service }) => ({ status: 'deployed', service }), { name: 'deploy', description: 'Deploys.', schema: z.object({ service: z.string() }) });
  const name: 'langgraph' = ADAPTER;
  const claim = coverage({ everyToolWrapped: true, nativeTools: false });
  const run = await createRun(await load(), { document: 'runbook.yaml', agent: name, coverage: claim, runsRoot: '.runbook/runs' });
  const approve: Approver = async (request: ApprovalRequest, { signal }) => {
    const sha: string = request.callSha256;
    const id: string | null = request.toolCallId;
    return { approver: signal.aborted ? sha : (id ?? 'alice'), granted: true };
  };
  const node = new RunbookToolNode([deploy], { run, approve, approvalTimeout: 60, handleToolErrors: true });
  const asToolNode: ToolNode = node;
  const agent = createReactAgent({ llm, tools: node });
  const wrapped: RunbookTool[] = runbookTools([deploy], { run });
  const one = new RunbookTool(deploy, { run });
  const inner: typeof deploy = one.wrapped;
  createReactAgent({ llm, tools: wrapped });
  try {
    await one.invoke({ service: 'payments-api' });
  } catch (e) {
    if (e instanceof ToolBlocked) console.log(e.message, asToolNode.tools.length, inner.name);
  }
  const result = await agent.invoke({ messages: [{ role: 'user', content: 'Ship it.' }] });
  // @ts-expect-error: the approval callback answers {approver, granted}
  new RunbookToolNode([deploy], { run, approve: () => true });
  // @ts-expect-error: the run is required
  new RunbookToolNode([deploy], {});
  // @ts-expect-error: coverage says whether every tool is wrapped
  coverage({});
  // @ts-expect-error: the adapter's name is its own
  await createRun(await load(), { document: 'runbook.yaml', coverage: claim, adapter: 'x' });
  return endRun(run, result);
}
