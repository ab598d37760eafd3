import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent, run } from '@openai/agents';
import { z } from 'zod';
import { load } from 'runbook-policy';
import { createRun, endRun, supervise, tool } from 'runbook-policy/openai-agents';

export async function shipHotfix(model, { repo, approve, ...runOptions }) {
  const tools = [
    tool({ name: 'read_file', description: 'Reads a file of the repository.', parameters: z.object({ path: z.string() }),
      execute: ({ path }) => readFile(join(repo, path), 'utf8') }),
    tool({ name: 'deploy', description: 'Deploys a service.', parameters: z.object({ service: z.string() }),
      execute: async ({ service }) => ({ status: 'deployed', service }) }),
  ];
  const agent = new Agent({ name: 'release-bot', instructions: 'Ship the hotfix the changelog names.', model, tools });
  // Coverage is complete: every tool of the agent is a function tool the supervisor sees.
  const runbook = await createRun(await load(), agent, { document: 'runbook.yaml', ...runOptions });
  // A deploy waits for `approve`, your program's callback (a person), before it runs.
  const result = await run(supervise(agent, runbook, { approve }), 'Ship the payments-api hotfix.');
  return { output: result.finalOutput, outcome: endRun(runbook), dir: runbook.dir };
}
