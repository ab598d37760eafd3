// An AI SDK tool loop whose every tool call the runbook decides first.
import { generateText, stepCountIs } from 'ai';
import { load } from 'runbook-policy';
import { createRun, endRun, endRunOnFinish, supervise } from 'runbook-policy/ai-sdk';

export async function shipHotfix(model, tools, { approve, document = 'ship-hotfix.yaml', runsRoot } = {}) {
  // The coverage is computed from the tools: complete unless some of them the provider runs itself.
  const run = await createRun(await load(), { document, runsRoot, agent: 'release-bot', tools });
  try {
    // approve(request) is the program's own channel to a person; it answers { approver, granted }.
    const result = await generateText({
      model,
      tools: supervise(tools, run, { approve }),
      stopWhen: stepCountIs(10),
      prompt: 'Ship the payments-api hotfix.',
      onFinish: endRunOnFinish(run), // the final answer is recorded, the run ends, its bundle is written
    });
    return { run, text: result.text, outcome: endRun(run) };
  } catch (e) {
    endRun(run, 'interrupted');
    throw e;
  }
}
