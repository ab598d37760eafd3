import runbook_policy as rp
from agents import Agent, Runner, function_tool
from runbook_policy.openai_agents import coverage, supervise


@function_tool
def read_file(path: str) -> str:
    """Reads a file of the repository."""
    with open(path) as f:
        return f.read()


@function_tool
def deploy(service: str) -> dict:
    """Deploys a service."""
    return {"status": "deployed", "service": service}


async def ship_hotfix(model, approve, runbook="runbook.yaml") -> rp.Run:
    agent = Agent(name="release-bot", model=model, tools=[read_file, deploy])
    run = rp.Run.create(rp.load(), runbook, adapter="openai-agents", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage(agent))
    result = await Runner.run(supervise(agent, run, approve=approve), "Ship the payments-api hotfix.")
    print(result.final_output, run.end())  # the agent's answer ended the run; end() gives the outcome
    return run
