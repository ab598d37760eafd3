// runbook-host's opencode plugin, written by `runbook-host hook --client opencode install` (the whole file
// is ours; `uninstall` removes it). opencode has no external hook: this plugin, in its loop, asks the hook
// command about every tool call and throws on a deny, which blocks the call and hands the model the
// reason. Any failure to get an answer (the binary gone, a crash, output that is not JSON) is a deny.
const COMMAND = @COMMAND@;

async function ask(payload) {
  let proc;
  try {
    proc = Bun.spawn(["/bin/sh", "-c", COMMAND], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  } catch (e) {
    return { deny: `runbook-host hook: no answer from the hook, so the call is denied (${e.message})` };
  }
  proc.stdin.write(JSON.stringify(payload));
  proc.stdin.end();
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited]);
  if (code !== 0) {
    // Our own denials (a fail-closed error) say so themselves; anything else (the binary gone, a crash) is
    // said to be no answer.
    const said = err.trim();
    return { deny: said.startsWith("runbook-host hook:") ? said : `runbook-host hook: no answer from the hook (exit ${code}), so the call is denied: ${said}` };
  }
  if (!out.trim()) return {};
  try {
    const answer = JSON.parse(out);
    return answer.decision === "deny" || answer.decision === "block" ? { deny: String(answer.reason) } : {};
  } catch {
    return { deny: "runbook-host hook: an answer that is not JSON, so the call is denied" };
  }
}

export const RunbookHost = async () => {
  const started = new Set();
  const start = async (session) => {
    if (started.has(session)) return {};
    started.add(session);
    return ask({ session_id: session, hook_event_name: "SessionStart" });
  };
  const tool = (event, input, output, extra) => ({
    session_id: input.sessionID,
    hook_event_name: event,
    tool_name: input.tool,
    tool_input: (event === "PreToolUse" ? output.args : input.args) ?? {},
    tool_use_id: input.callID,
    ...extra,
  });
  return {
    "tool.execute.before": async (input, output) => {
      const s = await start(input.sessionID);
      if (s.deny) throw new Error(s.deny);
      const a = await ask(tool("PreToolUse", input, output, {}));
      if (a.deny) throw new Error(a.deny);
    },
    "tool.execute.after": async (input, output) => {
      const a = await ask(tool("PostToolUse", input, output, { tool_response: output ?? {} }));
      if (a.deny) throw new Error(a.deny);
    },
    event: async ({ event }) => {
      const session = event?.properties?.sessionID;
      if (event?.type === "session.idle" && session && started.has(session)) {
        await ask({ session_id: session, hook_event_name: "Stop" });
      }
    },
  };
};
