// Types only (checked by `tsc -p test/tsconfig.json`, never run): a supervised ToolSet keeps its type, so
// generateText/streamText/ToolLoopAgent take it as they take the ToolSet, endRunOnFinish fits their
// `onFinish`, a generateText result fits finishRun, and the README's lines type-check.
import { Experimental_Agent as ToolLoopAgent, generateText, stepCountIs, streamText, tool, type LanguageModel } from 'ai';
import { z } from 'zod';
import { load } from '../src/node.js';
import {
  coverage,
  createRun,
  endRun,
  endRunOnFinish,
  finishRun,
  RunbookBlocked,
  supervise,
  type ApprovalAnswer,
  type ApprovalRequest,
} from '../src/ai-sdk.js';
import type { Coverage, Outcome } from '../src/types.js';

export async function example(model: LanguageModel): Promise<void> {
  const tools = {
    deploy: tool({
      description: 'Deploys a service.',
      inputSchema: z.object({ service: z.string() }),
      execute: async ({ service }) => ({ status: 'deployed', service }),
    }),
  };
  const approve = async (request: ApprovalRequest): Promise<ApprovalAnswer> => ({ approver: 'alice', granted: request.tool === 'deploy' });
  const run = await createRun(await load(), { document: 'runbook.yaml', agent: 'release-bot', tools });
  const supervised: typeof tools = supervise(tools, run, { approve, approvalTimeout: 60 });
  const result = await generateText({ model, tools: supervised, stopWhen: stepCountIs(10), prompt: 'Ship it.', onFinish: endRunOnFinish(run) });
  // The tool's output type survives the wrapping.
  const deployed: string | undefined = result.staticToolResults.find((r) => r.toolName === 'deploy')?.output.status;
  const outcome: Outcome | null = finishRun(run, result);
  const ended: Outcome = endRun(run, 'interrupted');

  const stream = streamText({ model, tools: supervised, prompt: 'Ship it.', onFinish: endRunOnFinish(run) });
  const agent = new ToolLoopAgent({ model, tools: supervised, onFinish: endRunOnFinish(run) });

  const claimed: Coverage = coverage(tools, { everyToolSupervised: false });
  const explicit = await createRun(await load(), { document: 'runbook.yaml', agent: 'release-bot', coverage: claimed });
  const blocked = new RunbookBlocked('no');
  const kind: string | undefined = blocked.answer?.kind;
  void [deployed, outcome, ended, stream, agent, explicit, kind];
}
