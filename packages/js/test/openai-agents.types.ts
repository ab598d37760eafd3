// Types only (checked by `tsc -p test/tsconfig.json`, never run): the adapter's API fits the SDK's Agent,
// run() and tool() as they are, and the README's lines type-check.
import { Agent, run, tool as sdkTool, webSearchTool, type FunctionTool, type Model } from '@openai/agents';
import { z } from 'zod';
import { load } from '../src/node.js';
import {
  ADAPTER,
  Supervisor,
  coverage,
  createRun,
  endRun,
  supervise,
  tool,
  type ApprovalAnswer,
  type ApprovalRequest,
  type Approver,
} from '../src/openai-agents.js';

export async function example(model: Model): Promise<string | undefined> {
  const deploy = tool({
    name: 'deploy',
    description: 'Deploys a service.',
    parameters: z.object({ service: z.string() }),
    execute: async ({ service }) => ({ status: 'deployed', service }),
  });
  const plain: FunctionTool<unknown, any, any> = sdkTool({ name: 'ping', description: 'Pings.', parameters: z.object({}), execute: async () => 'pong' });
  const agent = new Agent({ name: 'release-bot', model, tools: [deploy, plain] });
  const approve: Approver = async (request: ApprovalRequest, { signal }): Promise<ApprovalAnswer> => ({ approver: 'alice', granted: request.tool === 'deploy' && !signal.aborted });
  const runbook = await createRun(await load(), agent, { document: 'runbook.yaml', runsRoot: '.runbook/runs' });
  const supervised: Agent<unknown, 'text'> = supervise(agent, runbook, { approve, approvalTimeout: 60 });
  const result = await run(supervised, 'Ship the hotfix.');
  const outcome: 'completed' | 'incomplete' | 'refused' | 'failed' | 'aborted' = endRun(runbook, 'interrupted');
  const claim: 'complete' | string[] = coverage(new Agent({ name: 'searcher', tools: [webSearchTool()] }));
  const wrapped = new Supervisor(runbook).wrap(deploy);
  const name: 'openai-agents' = ADAPTER;
  void [outcome, claim, wrapped, name];
  return result.finalOutput;
}
