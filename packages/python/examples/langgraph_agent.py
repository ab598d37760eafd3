import runbook_policy as rp
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from runbook_policy.langgraph import RunbookToolNode, coverage, finish


def ship_hotfix(model, tools, approve, runbook="runbook.yaml"):
    run = rp.Run.create(rp.load(), runbook, adapter="langgraph", agent="release-bot", profile="R2",
                        risk_ceiling="destructive", coverage=coverage(every_tool_in_the_node=True))
    llm = model.bind_tools(tools)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_node("tools", RunbookToolNode(tools, run=run, approve=approve))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    state = graph.compile().invoke({"messages": [("user", "ship the hotfix")]})
    finish(run)  # the agent has answered: record it and end the run (report, receipt)
    return run, state["messages"][-1].content
