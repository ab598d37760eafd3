//! Peers on the same question the policy core answers for each `invoke`: "may tool T run in step S?",
//! for the scope of [`runbook_benches::DECISION_RUNBOOK`] (step `inspect`: `db.read`, and `Bash` when the
//! command is `kubectl get <name>`; step `fix`: `db.write`). Only with `--features peers`.
//!
//! - `plain-rust-map`: a `HashMap<step, HashSet<tool>>` lookup (the floor; no `when`: the Bash question
//!   adds a `starts_with`);
//! - `cedar`: the `cedar-policy` crate, a request built from the strings (entity ids and a context of
//!   `step` and `command`) and authorized against three `permit` policies (Cedar has no regex: the Bash
//!   policy uses `like "kubectl get *"`);
//! - `regorus-interpreter` and `regorus-rvm`: the `regorus` crate's Rego, the input parsed from JSON text
//!   on every question (as the component's typed path parses the arguments' JSON text), evaluated by the
//!   tree-walking interpreter (`Engine::eval_rule`) and by the compiled Rego VM (`RegoVM::execute`).
//!
//! The same three questions through the runbook core are the `decision/*-invoke-only` benches.

use cedar_policy::{Authorizer, Context, Decision, Entities, EntityId, EntityTypeName, EntityUid, PolicySet, Request, RestrictedExpression};
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use regorus::languages::rego::compiler::Compiler;
use regorus::rvm::vm::RegoVM;
use regorus::{Engine, Rc, Value};
use std::collections::{HashMap, HashSet};
use std::str::FromStr;

const CEDAR_POLICIES: &str = r#"
permit(principal, action == Action::"invoke", resource == Tool::"db.read") when { context.step == "inspect" };
permit(principal, action == Action::"invoke", resource == Tool::"Bash") when { context.step == "inspect" && context.command like "kubectl get *" };
permit(principal, action == Action::"invoke", resource == Tool::"db.write") when { context.step == "fix" };
"#;

const REGO_POLICY: &str = r#"
package runbook

import rego.v1

scope := {
  "inspect": {"db.read"},
  "fix": {"db.write"},
}

default allow := false

allow if {
  scope[input.step][input.tool]
}

allow if {
  input.step == "inspect"
  input.tool == "Bash"
  regex.match(`^kubectl get [a-z0-9./-]+$`, input.arguments.command)
}
"#;

const ENTRY: &str = "data.runbook.allow";

/// (name, step, tool, arguments JSON, expected answer)
const QUESTIONS: [(&str, &str, &str, &str, bool); 3] = [
    ("allowed-db.read-in-inspect", "inspect", "db.read", r#"{"table":"users","limit":10}"#, true),
    ("bash-when-regex-in-inspect", "inspect", "Bash", r#"{"command":"kubectl get pods/web-1"}"#, true),
    ("denied-db.write-in-inspect", "inspect", "db.write", "{}", false),
];

struct CedarPeer {
    authorizer: Authorizer,
    policies: PolicySet,
    entities: Entities,
    agent_type: EntityTypeName,
    action: EntityUid,
    tool_type: EntityTypeName,
}

impl CedarPeer {
    fn new() -> CedarPeer {
        CedarPeer {
            authorizer: Authorizer::new(),
            policies: PolicySet::from_str(CEDAR_POLICIES).expect("cedar policies parse"),
            entities: Entities::empty(),
            agent_type: EntityTypeName::from_str("Agent").unwrap(),
            action: EntityUid::from_str(r#"Action::"invoke""#).unwrap(),
            tool_type: EntityTypeName::from_str("Tool").unwrap(),
        }
    }

    fn may(&self, step: &str, tool: &str, command: Option<&str>) -> bool {
        let principal = EntityUid::from_type_name_and_id(self.agent_type.clone(), EntityId::new("agent-1"));
        let resource = EntityUid::from_type_name_and_id(self.tool_type.clone(), EntityId::new(tool));
        let mut ctx = vec![("step".to_string(), RestrictedExpression::new_string(step.to_string()))];
        if let Some(c) = command {
            ctx.push(("command".to_string(), RestrictedExpression::new_string(c.to_string())));
        }
        let context = Context::from_pairs(ctx).expect("context");
        let request = Request::new(principal, self.action.clone(), resource, context, None).expect("request");
        self.authorizer.is_authorized(&request, &self.policies, &self.entities).decision() == Decision::Allow
    }
}

fn rego_input(step: &str, tool: &str, args: &str) -> String {
    format!(r#"{{"step":"{step}","tool":"{tool}","arguments":{args}}}"#)
}

fn peers(c: &mut Criterion) {
    // The floor: a map of each step's tools.
    let mut map: HashMap<String, HashSet<String>> = HashMap::new();
    map.entry("inspect".into()).or_default().insert("db.read".into());
    map.entry("fix".into()).or_default().insert("db.write".into());
    let map_may = |step: &str, tool: &str, command: Option<&str>| {
        map.get(step).is_some_and(|t| t.contains(tool)) || (step == "inspect" && tool == "Bash" && command.is_some_and(|c| c.starts_with("kubectl get ")))
    };

    let cedar = CedarPeer::new();

    let mut engine = Engine::new();
    engine.add_policy("runbook.rego".to_string(), REGO_POLICY.to_string()).expect("rego policy parses");
    let entry: Rc<str> = ENTRY.into();
    let compiled = engine.compile_with_entrypoint(&entry).expect("rego compiles");
    let program = Compiler::compile_from_policy(&compiled, &[ENTRY]).expect("rvm program");
    let mut vm = RegoVM::new();
    vm.load_program(program);

    for (name, step, tool, args, want) in QUESTIONS {
        let command = (tool == "Bash").then_some("kubectl get pods/web-1");
        let input = rego_input(step, tool, args);
        // Every peer gives the expected answer.
        assert_eq!(map_may(step, tool, command), want, "{name}: map");
        assert_eq!(cedar.may(step, tool, command), want, "{name}: cedar");
        engine.set_input(Value::from_json_str(&input).unwrap());
        assert_eq!(engine.eval_rule(ENTRY.to_string()).expect("rego eval"), Value::from(want), "{name}: regorus interpreter");
        vm.set_input(Value::from_json_str(&input).unwrap());
        assert_eq!(vm.execute().expect("rvm execute"), Value::from(want), "{name}: regorus rvm");

        let mut g = c.benchmark_group(format!("peers/{name}"));
        g.bench_function("plain-rust-map", |b| b.iter(|| black_box(map_may(black_box(step), black_box(tool), black_box(command)))));
        g.bench_function("cedar", |b| b.iter(|| black_box(cedar.may(black_box(step), black_box(tool), black_box(command)))));
        g.bench_function("regorus-interpreter", |b| {
            b.iter(|| {
                engine.set_input(Value::from_json_str(black_box(&input)).unwrap());
                black_box(engine.eval_rule(ENTRY.to_string()).unwrap())
            })
        });
        g.bench_function("regorus-rvm", |b| {
            b.iter(|| {
                vm.set_input(Value::from_json_str(black_box(&input)).unwrap());
                black_box(vm.execute().unwrap())
            })
        });
        g.finish();
    }
}

criterion_group!(benches, peers);
criterion_main!(benches);
