#!/usr/bin/env node
// The TypeScript SDK's client (@modelcontextprotocol/client, pinned in package.json) over stdio, for
// host/tests/it/proxy.rs: it starts SERVER_CMD (the proxy in front of the conformance fixture, or the fixture
// alone), uses what MCP offers besides tools (a resource, a template, a prompt, a completion) and a tool
// whose server samples through the client (answered `sampled: <prompt>`), and prints one JSON object of
// what it got, so a test can compare the proxy with the server alone.
//
//   node ts_client.mjs -- SERVER_CMD [ARGS...]
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const argv = process.argv.slice(2);
const cmd = argv[0] === "--" ? argv.slice(1) : argv;
const client = new Client({ name: "ts-sdk-client", version: "1.0.0" }, { capabilities: { sampling: {} } });
const sampled = [];
client.setRequestHandler("sampling/createMessage", (request) => {
  const prompt = request.params.messages[0].content.text;
  sampled.push(prompt);
  return { role: "assistant", content: { type: "text", text: `sampled: ${prompt}` }, model: "scripted" };
});
const transport = new StdioClientTransport({ command: cmd[0], args: cmd.slice(1), stderr: "inherit" });
const out = {};
try {
  await client.connect(transport);
  out.resources = (await client.listResources()).resources.map((r) => r.uri).sort();
  out.templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
  out.text = (await client.readResource({ uri: "test://static-text" })).contents;
  out.binary = (await client.readResource({ uri: "test://static-binary" })).contents;
  out.template = (await client.readResource({ uri: "test://template/123/data" })).contents;
  out.prompt = (await client.getPrompt({ name: "test_prompt_with_arguments", arguments: { arg1: "a", arg2: "b" } })).messages;
  out.image_prompt = (await client.getPrompt({ name: "test_prompt_with_image" })).messages;
  out.completion = (await client.complete({ ref: { type: "ref/prompt", name: "test_prompt_with_arguments" }, argument: { name: "arg1", value: "pa" } })).completion.values;
  const called = await client.callTool({ name: "test_sampling", arguments: { prompt: "capital of France?" } });
  out.sampling = called.content;
  out.sampled = sampled;
} catch (e) {
  out.error = String(e?.message ?? e);
}
await client.close().catch(() => {});
process.stdout.write(JSON.stringify(out) + "\n");
