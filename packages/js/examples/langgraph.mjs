// A LangGraph ReAct agent whose every tool call the runbook decides first.
import { createReactAgent } from '@langchain/langgraph/prebuilt';
import { load } from 'runbook-policy';
import { RunbookToolNode, coverage, createRun, endRun } from 'runbook-policy/langgraph';

export async function shipHotfix(llm, tools, { approve, document = 'ship-hotfix.yaml', runsRoot } = {}) {
  const run = await createRun(await load(), {
    document,
    runsRoot,
    agent: 'release-bot',
    coverage: coverage({ everyToolWrapped: true }), // every tool goes through the RunbookToolNode
  });
  // approve(request) is the program's own channel to a person; it answers { approver, granted }.
  const agent = createReactAgent({ llm, tools: new RunbookToolNode(tools, { run, approve }) });
  const result = await agent.invoke({ messages: [{ role: 'user', content: 'Ship the payments-api hotfix.' }] });
  return { run, result, outcome: endRun(run, result) };
}
