//! The upstream servers from a configuration file in the shape MCP clients already use (`.mcp.json`):
//! `{"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}}` for a server the proxy
//! starts, `{"NAME": {"type": "http", "url": "https://...", "headers": {...}}}` for one it reaches over
//! Streamable HTTP. A server's own arguments may then hold `--`, which the command line's
//! `-- SERVER CMD -- SERVER CMD` cannot say.
//!
//! `${VAR}` and `${VAR:-default}` in `command`, `args`, `env`, `url` and `headers` values are expanded from
//! the proxy's environment, as Claude Code does; a variable that is unset and has no default is an error,
//! never an empty string. Servers are started in the order of their names. Any key this reader does not
//! know is refused with its place, so that nothing in the file is silently ignored; so is `type: "sse"`
//! (the transport MCP retired) and a URL that is neither `http://` nor `https://`.

use super::ServerSpec;
use serde_json::Value;

/// Reads the servers of a configuration file's text; `lookup` reads an environment variable.
pub fn parse(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Vec<ServerSpec>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let servers = v.get("mcpServers").and_then(Value::as_object).ok_or("no `mcpServers` object")?;
    if servers.is_empty() {
        return Err("`mcpServers` names no server".into());
    }
    // In the order of their names, whatever order the JSON map keeps (serde_json's `preserve_order`
    // feature, which another crate of a build may turn on, keeps the file's order).
    let mut servers: Vec<(&String, &Value)> = servers.iter().collect();
    servers.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (name, s) in servers {
        let at = format!("mcpServers.{name}");
        if name.is_empty() || name.contains('.') || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!("{at}: `{name}` is not a usable server name (no dot, no space)"));
        }
        let s = s.as_object().ok_or_else(|| format!("{at}: not an object"))?;
        let kind = match s.get("type").map(|t| t.as_str()) {
            None | Some(Some("stdio")) => "stdio",
            Some(Some("http" | "streamable-http")) => "http",
            Some(Some(t)) => return Err(format!("{at}.type: `{t}` servers are not supported: stdio (command, args, env) or http (url, headers)")),
            Some(None) => return Err(format!("{at}.type: not a string")),
        };
        let known: &[&str] = if kind == "http" { &["type", "url", "headers"] } else { &["type", "command", "args", "env"] };
        let mut keys: Vec<&String> = s.keys().collect();
        keys.sort();
        for k in keys {
            if !known.contains(&k.as_str()) {
                return Err(format!("{at}.{k}: not a key of a{} server ({})", if kind == "http" { "n http" } else { " stdio" }, known.join(", ")));
            }
        }
        if kind == "http" {
            let url = s.get("url").and_then(Value::as_str).ok_or_else(|| format!("{at}.url: missing or not a string"))?;
            let url = expand(url, lookup).map_err(|e| format!("{at}.url: {e}"))?;
            check_url(&url).map_err(|e| format!("{at}.url: {e}"))?;
            let headers = string_map(s, "headers", &at, lookup)?;
            for (k, v) in &headers {
                check_header(k, v).map_err(|e| format!("{at}.headers.{k}: {e}"))?;
            }
            out.push(ServerSpec { name: Some(name.clone()), url: Some(url), headers, ..Default::default() });
            continue;
        }
        let command = s.get("command").and_then(Value::as_str).ok_or_else(|| format!("{at}.command: missing or not a string"))?;
        let mut argv = vec![expand(command, lookup).map_err(|e| format!("{at}.command: {e}"))?];
        if argv[0].is_empty() {
            return Err(format!("{at}.command: empty"));
        }
        if let Some(args) = s.get("args") {
            let args = args.as_array().ok_or_else(|| format!("{at}.args: not an array"))?;
            for (i, a) in args.iter().enumerate() {
                let a = a.as_str().ok_or_else(|| format!("{at}.args[{i}]: not a string"))?;
                argv.push(expand(a, lookup).map_err(|e| format!("{at}.args[{i}]: {e}"))?);
            }
        }
        let env = string_map(s, "env", &at, lookup)?;
        out.push(ServerSpec { name: Some(name.clone()), argv, env, ..Default::default() });
    }
    Ok(out)
}

/// An object of strings (`env`, `headers`), expanded, in the order of its keys; absent is empty.
fn string_map(server: &serde_json::Map<String, Value>, key: &str, at: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Vec<(String, String)>, String> {
    let Some(m) = server.get(key) else { return Ok(Vec::new()) };
    let m = m.as_object().ok_or_else(|| format!("{at}.{key}: not an object"))?;
    let mut m: Vec<(&String, &Value)> = m.iter().collect();
    m.sort_by(|a, b| a.0.cmp(b.0));
    let mut out = Vec::new();
    for (k, v) in m {
        let v = v.as_str().ok_or_else(|| format!("{at}.{key}.{k}: not a string"))?;
        out.push((k.clone(), expand(v, lookup).map_err(|e| format!("{at}.{key}.{k}: {e}"))?));
    }
    Ok(out)
}

/// A server's URL, by [`crate::net::check_url`]: `https://`, or `http://` to loopback only (a token in
/// `headers` never crosses a network in the clear); never credentials in the URL itself.
pub fn check_url(url: &str) -> Result<(), String> {
    crate::net::check_url(url).map(|_| ()).map_err(|e| e.0)
}

/// A header the proxy may send: a valid name and value, and none that HTTP or MCP's transport sets itself.
fn check_header(name: &str, value: &str) -> Result<(), String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
        return Err("not a valid header name".into());
    }
    if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err("the value holds a line break".into());
    }
    let lower = name.to_ascii_lowercase();
    if [
        "host",
        "content-length",
        "content-type",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "transfer-encoding",
        "connection",
    ]
    .contains(&lower.as_str())
    {
        return Err(format!("`{name}` is set by the transport, not by the configuration"));
    }
    Ok(())
}

/// `${VAR}` and `${VAR:-default}` expanded; `$` anywhere else is kept as it is.
fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 2..];
        let end = tail.find('}').ok_or_else(|| format!("`{s}`: an unclosed `${{`"))?;
        let inner = &tail[..end];
        let (var, default) = match inner.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (inner, None),
        };
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("`${{{inner}}}` is not a variable"));
        }
        match (lookup(var), default) {
            (Some(v), _) => out.push_str(&v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => return Err(format!("${{{var}}} is not set (and has no `:-default`)")),
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "HOME_DIR").then(|| "base".to_string())
    }

    #[test]
    fn servers_with_dashes_variables_and_env() {
        let text = r#"{"mcpServers": {
            "tap": {"command": "python3", "args": ["tap.py", "--log", "${HOME_DIR}/log", "--", "node", "server.js"]},
            "fs": {"type": "stdio", "command": "${NODE:-node}", "env": {"ROOT": "${HOME_DIR}/data", "PLAIN": "a$b"}}
        }}"#;
        let s = parse(text, &env).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].name.as_deref(), s[0].argv.as_slice(), s[0].env.as_slice()),
            (Some("fs"), &["node".to_string()][..], &[("PLAIN".into(), "a$b".into()), ("ROOT".into(), "base/data".into())][..])
        );
        assert_eq!(s[1].argv, ["python3", "tap.py", "--log", "base/log", "--", "node", "server.js"]);
    }

    #[test]
    fn http_servers_with_headers() {
        let text = r#"{"mcpServers": {"remote": {"type": "http", "url": "https://mcp.example/${HOME_DIR}/mcp", "headers": {"X-Team": "ops", "Authorization": "Bearer ${HOME_DIR}"}}}}"#;
        let s = parse(text, &env).unwrap();
        assert_eq!(s[0].url.as_deref(), Some("https://mcp.example/base/mcp"));
        assert_eq!(s[0].headers, [("Authorization".to_string(), "Bearer base".to_string()), ("X-Team".into(), "ops".into())]);
        assert!(s[0].argv.is_empty());
    }

    #[test]
    fn what_is_refused_says_where() {
        for (text, want) in [
            ("[]", "no `mcpServers` object"),
            (r#"{"mcpServers": {}}"#, "names no server"),
            (r#"{"mcpServers": {"r": {"type": "sse", "url": "https://x/sse"}}}"#, "mcpServers.r.type: `sse` servers are not supported"),
            (r#"{"mcpServers": {"r": {"type": "http", "command": "x"}}}"#, "mcpServers.r.command: not a key of an http server"),
            (r#"{"mcpServers": {"r": {"type": "http", "url": "ftp://x/mcp"}}}"#, "mcpServers.r.url: `ftp://x/mcp`: the scheme `ftp` is not supported"),
            (
                r#"{"mcpServers": {"r": {"type": "http", "url": "http://tools.example/mcp"}}}"#,
                "mcpServers.r.url: `http://tools.example/mcp`: plain http:// is only allowed to a loopback",
            ),
            (
                r#"{"mcpServers": {"r": {"type": "http", "url": "https://u:p@x/mcp"}}}"#,
                "mcpServers.r.url: `https://u:p@x/mcp`: credentials in a URL are refused",
            ),
            (
                r#"{"mcpServers": {"r": {"type": "http", "url": "https://x/mcp", "headers": {"Mcp-Session-Id": "1"}}}}"#,
                "mcpServers.r.headers.Mcp-Session-Id: `Mcp-Session-Id` is set by the transport",
            ),
            (r#"{"mcpServers": {"r": {"type": "http", "url": "https://x/mcp", "headers": {"X": "${TOKEN}"}}}}"#, "mcpServers.r.headers.X: ${TOKEN} is not set"),
            (r#"{"mcpServers": {"r": {"command": "x", "cwd": "/"}}}"#, "mcpServers.r.cwd: not a key"),
            (r#"{"mcpServers": {"r": {"args": []}}}"#, "mcpServers.r.command: missing"),
            (r#"{"mcpServers": {"r": {"command": "x", "args": [1]}}}"#, "mcpServers.r.args[0]: not a string"),
            (r#"{"mcpServers": {"r": {"command": "${UNSET}"}}}"#, "mcpServers.r.command: ${UNSET} is not set"),
            (r#"{"mcpServers": {"r": {"command": "x", "env": {"A": "${A"}}}}"#, "mcpServers.r.env.A: `${A`: an unclosed"),
            (r#"{"mcpServers": {"a.b": {"command": "x"}}}"#, "not a usable server name"),
        ] {
            let e = parse(text, &env).unwrap_err();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
