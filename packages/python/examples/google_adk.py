import runbook_policy as rp
from google.adk.agents import Agent
from google.adk.apps import App
from google.adk.runners import InMemoryRunner
from google.genai import types
from runbook_policy.google_adk import RunbookPlugin, coverage


async def ship_hotfix(model, tools, approve, runbook="runbook.yaml") -> rp.Run:
    run = rp.Run.create(rp.load(), runbook, adapter="google-adk", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage())
    agent = Agent(name="release_bot", model=model, instruction="Ship the hotfix.", tools=tools)
    # The plugin goes first: it decides every tool call of every agent of the Runner.
    app = App(name="release", root_agent=agent, plugins=[RunbookPlugin(run, approve=approve)])
    async with InMemoryRunner(app=app) as runner:  # closing the Runner ends the run
        session = await runner.session_service.create_session(app_name="release", user_id="ops")
        message = types.Content(role="user", parts=[types.Part(text="Ship the payments-api hotfix.")])
        async for event in runner.run_async(user_id="ops", session_id=session.id, new_message=message):
            if event.is_final_response() and event.content and event.content.parts:
                print(event.content.parts[0].text)
    return run
