//! Seeded, reproducible generators of runbooks and event streams, for property and differential tests
//! (here and in every host). Compiled only with the `testgen` feature: never part of the component.

/// SplitMix64: tiny, seedable, the same sequence everywhere.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize].clone()
    }
}

/// The names a generated document uses, so events can refer to them.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    pub steps: Vec<String>,
    pub terminals: Vec<String>,
    /// (capability name, tool)
    pub capabilities: Vec<(String, String)>,
    pub checkpoints: Vec<String>,
}

const RISKS: [&str; 4] = ["read-only", "mutating", "destructive", "irreversible"];
const TOOLS: [&str; 6] = ["db.read", "db.write", "Bash", "deploy.rollback", "secrets.rotate", "http.get"];

fn q(s: &str) -> String {
    format!("\"{s}\"")
}

/// A runbook document (YAML or JSON text) and its shape. Mostly valid; `invalid_percent` of the time one
/// field is mangled so that lint and admission have something to refuse.
pub fn document(rng: &mut Rng, invalid_percent: u64) -> (String, Shape) {
    let mut shape = Shape::default();
    let ncaps = 1 + rng.below(5) as usize;
    for i in 0..ncaps {
        let tool = rng.pick(&TOOLS).to_string();
        shape.capabilities.push((format!("cap-{i}"), tool));
    }
    let manifest = rng.chance(10);
    let nsteps = if manifest { 0 } else { 1 + rng.below(6) as usize };
    for i in 0..nsteps {
        shape.steps.push(format!("s{i}"));
    }
    let nterm = if manifest { 0 } else { 1 + rng.below(2) as usize };
    for i in 0..nterm {
        shape.terminals.push(["done", "rolled-back", "escalated"][i].to_string());
    }
    let mut fields: Vec<(String, String)> = Vec::new();
    fields.push(("runbook_id".into(), q(&format!("gen-{}", rng.below(1000)))));
    fields.push(("version".into(), q(&format!("{}.{}.{}", rng.below(3), rng.below(10), rng.below(10)))));
    if rng.chance(30) {
        fields.push(("execution".into(), q(rng.pick(&["human-only", "human-with-agent", "agent-autonomous"]))));
    }
    if rng.chance(20) {
        fields.push(("min_runtime_profile".into(), q(rng.pick(&["R0", "R1", "R2"]))));
    }
    let caps: Vec<String> = shape
        .capabilities
        .iter()
        .map(|(name, tool)| {
            let mut m = vec![format!("\"name\":{}", q(name)), format!("\"tool\":{}", q(tool))];
            if rng.chance(70) {
                m.push(format!("\"risk\":{}", q(rng.pick(&RISKS))));
            }
            // A shell capability whose `when` does not pin the command is a lint error in a gated runbook
            // (docs/spec/runbook.md#tight-conditions): most `Bash` capabilities pin it, a few stay bare so admission refuses them.
            if tool == "Bash" && rng.chance(90) {
                m.push(format!("\"when\":{{\"path\":\"/command\",\"op\":\"matches\",\"value\":\"^kubectl (get|describe) [a-z0-9][a-z0-9./-]*$\"}}"));
            } else if rng.chance(15) && tool != "Bash" {
                m.push(format!("\"when\":{{\"path\":\"/n\",\"op\":\"{}\",\"value\":{}}}", rng.pick(&["lt", "gte", "equals"]), rng.below(10)));
            }
            format!("{{{}}}", m.join(","))
        })
        .collect();
    fields.push(("capabilities".into(), format!("[{}]", caps.join(","))));
    let mut steps = Vec::new();
    for i in 0..nsteps {
        let mut m = vec![format!("\"id\":{}", q(&shape.steps[i]))];
        let k = 1 + rng.below(2) as usize;
        let mut tools: Vec<String> = (0..k).map(|_| shape.capabilities[rng.below(ncaps as u64) as usize].0.clone()).collect();
        tools.dedup();
        if rng.chance(5) {
            tools.push("undeclared-thing".into());
        }
        let tools_json: Vec<String> = tools.iter().map(|t| q(t)).collect();
        m.push(format!("\"tools\":[{}]", tools_json.join(",")));
        if tools.len() > 1 {
            m.push(format!("\"observe\":{}", q(&tools[0])));
        }
        if rng.chance(30) {
            m.push(format!("\"risk\":{}", q(rng.pick(&RISKS))));
        }
        if rng.chance(25) {
            m.push("\"requires_approval\":true".into());
        }
        if rng.chance(70) {
            let preds = [
                "{\"path\":\"/is_error\",\"op\":\"equals\",\"value\":false}",
                "{\"path\":\"/result/ok\",\"op\":\"equals\",\"value\":true}",
                "{\"path\":\"/result/count\",\"op\":\"lte\",\"value\":5}",
                "{\"any\":[{\"path\":\"/result/status\",\"op\":\"in\",\"value\":[\"healthy\",\"ok\"]},{\"path\":\"/result/status\",\"op\":\"matches\",\"value\":\"^green\"}]}",
                "{\"not\":{\"path\":\"/result/errors\",\"op\":\"len_gte\",\"value\":1}}",
                "{\"path\":\"/result\",\"op\":\"contains\",\"value\":\"ok\"}",
            ];
            m.push(format!("\"assert\":[{}]", rng.pick(&preds)));
        }
        // Routes: forward only, so that no unbudgeted cycle appears; loops go through `retry`.
        let forward: Vec<String> = shape.steps[i + 1..].iter().chain(shape.terminals.iter()).cloned().collect();
        if i + 1 == nsteps || rng.chance(30) {
            m.push(format!("\"next\":{}", q(&rng.pick(&forward))));
        }
        if rng.chance(30) {
            m.push(format!("\"on_fail\":{}", q(&rng.pick(&forward))));
        }
        if rng.chance(35) {
            let to = &shape.steps[rng.below(i as u64 + 1) as usize];
            m.push(format!("\"retry\":{{\"to\":{},\"max\":{}}}", q(to), 1 + rng.below(3)));
        }
        steps.push(format!("{{{}}}", m.join(",")));
    }
    if nsteps > 0 {
        fields.push(("steps".into(), format!("[{}]", steps.join(","))));
        let t: Vec<String> = shape.terminals.iter().map(|t| q(t)).collect();
        fields.push(("terminals".into(), format!("[{}]", t.join(","))));
    }
    if manifest || rng.chance(20) {
        let mut cps = Vec::new();
        let tool = &shape.capabilities[0].1;
        let timeout = if rng.chance(30) { format!(",\"timeout_ms\":{}", 50 + rng.below(200)) } else { String::new() };
        cps.push(format!("{{\"id\":\"cp-call\",\"kind\":\"tool_call\",\"required\":true,\"match\":{{\"tool\":{}}}{timeout}}}", q(tool)));
        shape.checkpoints.push("cp-call".into());
        if rng.chance(60) {
            cps.push("{\"id\":\"cp-out\",\"kind\":\"condition\",\"required\":true,\"condition\":\"final_output\"}".into());
            shape.checkpoints.push("cp-out".into());
        }
        fields.push(("checkpoints".into(), format!("[{}]", cps.join(","))));
    }
    if rng.chance(invalid_percent) {
        let (k, v) = rng.pick(&[
            ("requires_aproval", "true"),
            ("mode", "\"sometimes\""),
            ("version", "\"v1\""),
            ("steps", "{\"id\":\"x\"}"),
            ("failure_policy", "\"report_only\""),
            ("terminals", "[\"s0\"]"),
        ]);
        fields.retain(|(f, _)| f != k);
        fields.push((k.to_string(), v.to_string()));
    }
    let json = format!("{{{}}}", fields.iter().map(|(k, v)| format!("{}:{v}", q(k))).collect::<Vec<_>>().join(","));
    if rng.chance(50) {
        (json, shape)
    } else {
        (to_yaml(&json), shape)
    }
}

/// The same data as block-style YAML (flow collections for the leaves), so both parsers get exercised.
fn to_yaml(json: &str) -> String {
    let node = crate::json::parse(json).node.expect("generated JSON parses");
    let mut out = String::new();
    yaml_node(&node, 0, &mut out, false);
    out
}

fn yaml_node(node: &crate::value::Node, indent: usize, out: &mut String, in_list: bool) {
    use crate::value::Value;
    let pad = " ".repeat(indent);
    match &node.value {
        Value::Obj(members) if !members.is_empty() => {
            for (i, m) in members.iter().enumerate() {
                if !(in_list && i == 0) {
                    out.push_str(&pad);
                }
                out.push_str(&m.key);
                out.push(':');
                match &m.value.value {
                    Value::Obj(x) if !x.is_empty() => {
                        out.push('\n');
                        yaml_node(&m.value, indent + 2, out, false);
                    }
                    Value::Arr(x) if !x.is_empty() => {
                        out.push('\n');
                        yaml_node(&m.value, indent + 2, out, false);
                    }
                    _ => {
                        out.push(' ');
                        out.push_str(&crate::jcs::to_string(&m.value));
                        out.push('\n');
                    }
                }
            }
        }
        Value::Arr(items) if !items.is_empty() => {
            for it in items {
                out.push_str(&pad);
                out.push_str("- ");
                match &it.value {
                    Value::Obj(x) if !x.is_empty() => yaml_node(it, indent + 2, out, true),
                    _ => {
                        out.push_str(&crate::jcs::to_string(it));
                        out.push('\n');
                    }
                }
            }
        }
        _ => {
            out.push_str(&pad);
            out.push_str(&crate::jcs::to_string(node));
            out.push('\n');
        }
    }
}

/// An event stream for a document of `shape`: a `start` claim, then a random mix of every event kind,
/// mostly plausible, sometimes malformed, usually ending with `end`.
pub fn events(rng: &mut Rng, shape: &Shape) -> Vec<String> {
    let mut lines = Vec::new();
    let profile = rng.pick(&["R0", "R1", "R2", "R2"]);
    let coverage = if rng.chance(80) { "\"complete\"".to_string() } else { "[\"shell\"]".to_string() };
    let allow = if rng.chance(85) { "[\"*\"]".to_string() } else { format!("[{}]", q(&shape.capabilities[0].1)) };
    let ceiling = rng.pick(&["irreversible", "irreversible", "destructive", "mutating"]);
    lines.push(format!(
        "{{\"type\":\"start\",\"at\":0,\"run_id\":\"r-{}\",\"profile\":\"{profile}\",\"allowlist\":{allow},\"risk_ceiling\":\"{ceiling}\",\"coverage\":{coverage},\"agent\":\"agent-1\"}}",
        rng.below(100)
    ));
    let mut at = 0u64;
    let n = rng.below(40);
    let mut open_calls: Vec<(String, Option<String>, String)> = Vec::new();
    let mut call_no = 0;
    for _ in 0..n {
        at += rng.below(30);
        let all_steps: Vec<String> = shape.steps.iter().chain(shape.terminals.iter()).cloned().collect();
        let line = match rng.below(100) {
            0..=34 => {
                let tool = if rng.chance(85) { shape.capabilities[rng.below(shape.capabilities.len() as u64) as usize].1.clone() } else { "rm".to_string() };
                let args = match tool.as_str() {
                    "Bash" => format!("{{\"command\":{}}}", q(rng.pick(&["kubectl get pods", "kubectl delete ns prod", "kubectl describe deploy/api", "ls"]))),
                    _ => format!("{{\"n\":{}}}", rng.below(12)),
                };
                let cid = if rng.chance(60) {
                    call_no += 1;
                    Some(format!("c{call_no}"))
                } else {
                    None
                };
                open_calls.push((tool.clone(), cid.clone(), args.clone()));
                let cid_s = cid.map(|c| format!(",\"call_id\":{}", q(&c))).unwrap_or_default();
                let step = if rng.chance(10) && !all_steps.is_empty() { format!(",\"step\":{}", q(&rng.pick(&all_steps))) } else { String::new() };
                let guard = if rng.chance(3) { ",\"guard\":true" } else { "" };
                format!("{{\"type\":\"invoke\",\"at\":{at},\"tool\":{},\"arguments\":{args}{cid_s}{step}{guard}}}", q(&tool))
            }
            35..=64 => {
                let (tool, cid) = if !open_calls.is_empty() && rng.chance(85) {
                    let k = rng.below(open_calls.len() as u64) as usize;
                    let c = open_calls.remove(k);
                    (c.0, c.1)
                } else {
                    (shape.capabilities[0].1.clone(), None)
                };
                let result = rng.pick(&[
                    "{\"ok\":true,\"count\":3,\"status\":\"healthy\"}",
                    "{\"ok\":false,\"count\":9,\"errors\":[\"x\"]}",
                    "{\"status\":\"green-ish\"}",
                    "\"ok\"",
                    "[1,2,3]",
                    "null",
                ]);
                let cid_s = cid.map(|c| format!(",\"call_id\":{}", q(&c))).unwrap_or_default();
                format!("{{\"type\":\"result\",\"at\":{at},\"tool\":{},\"result\":{result},\"is_error\":{}{cid_s}}}", q(&tool), rng.chance(15))
            }
            65..=74 => {
                let step = if shape.steps.is_empty() || rng.chance(10) { "null".to_string() } else { q(&rng.pick(&shape.steps)) };
                let approver = if rng.chance(80) { "alice" } else { "agent-1" };
                let hash = if rng.chance(30) && !open_calls.is_empty() {
                    let c = rng.pick(&open_calls);
                    let args = crate::json::parse(&c.2).node.unwrap();
                    format!(",\"call_sha256\":{}", q(&crate::event::call_sha256(&c.0, &args)))
                } else {
                    String::new()
                };
                format!("{{\"type\":\"approval\",\"at\":{at},\"step\":{step},\"approver\":\"{approver}\",\"granted\":{}{hash}}}", rng.chance(85))
            }
            75..=81 if !all_steps.is_empty() => format!("{{\"type\":\"advance\",\"at\":{at},\"to\":{}}}", q(&rng.pick(&all_steps))),
            82..=87 if !shape.steps.is_empty() => format!(
                "{{\"type\":\"verdict\",\"at\":{at},\"step\":{},\"outcome\":\"{}\",\"by\":\"{}\"}}",
                q(&rng.pick(&shape.steps)),
                if rng.chance(70) { "pass" } else { "fail" },
                if rng.chance(85) { "bob" } else { "agent-1" }
            ),
            88..=91 => format!("{{\"type\":\"final_output\",\"at\":{at}}}"),
            92..=95 => format!("{{\"type\":\"tick\",\"at\":{at}}}"),
            96 => rng.pick(&["{\"type\":\"invoke\"}", "not json", "{\"type\":\"warp\",\"at\":1}", "{\"type\":\"tick\",\"at\":-1}"]).to_string(),
            _ => format!("{{\"type\":\"tick\",\"at\":{at}}}"),
        };
        lines.push(line);
    }
    if rng.chance(90) {
        at += rng.below(10);
        lines.push(format!("{{\"type\":\"end\",\"at\":{at},\"reason\":\"{}\"}}", rng.pick(&["normal", "normal", "client-closed", "server-exited"])));
    }
    lines
}
