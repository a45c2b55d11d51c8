//! Validation of `[mcp]`: each upstream server (`url` or `command`, never both; its secrets
//! from the environment), each `mcp` rung (a declared server), and the names rein will list,
//! which must never collide: prefixes are distinct and cannot run into each other, no
//! configured tool name starts with a server's prefix and `__`, and one upstream tool is taken
//! over by at most one configured ladder.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rein_core::problems::Problems;

use super::compile::{
    DEFAULT_MAX_RESPONSE_BYTES, ToolCtx, breaker_policy, bulkhead, env_secret, header_name,
};
use super::{McpConfig, McpServerConfig, RungConfig, RungKind, ToolConfig};
use crate::ladder::McpRung;
use crate::mcp::{McpServer, PREFIX_SEPARATOR, ServerEntry, Transport};

/// A call's budget for tools without a ladder of their own, and for mcp rungs without
/// `timeout_ms`.
pub(crate) const DEFAULT_MCP_TIMEOUT_MS: u64 = 10_000;
const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 5_000;

/// Compile every server; problems go to `ctx`.
pub(crate) fn compile_servers(
    config: &McpConfig,
    ctx: &mut ToolCtx<'_, '_>,
) -> BTreeMap<String, ServerEntry> {
    if config.list_ttl_ms == 0 {
        ctx.problems.add("mcp.list_ttl_ms", "must be greater than 0");
    }
    let list_ttl = Duration::from_millis(config.list_ttl_ms);
    let mut prefixes: BTreeMap<String, String> = BTreeMap::new();
    let mut entries = BTreeMap::new();
    for (name, raw) in &config.servers {
        let key = format!("mcp.servers.{name}");
        let prefix = raw.prefix.clone().unwrap_or_else(|| name.clone());
        let prefix_key = if raw.prefix.is_some() { format!("{key}.prefix") } else { key.clone() };
        if let Some(problem) = prefix_problem(&prefix) {
            ctx.problems.add(&prefix_key, format!("the prefix `{prefix}` {problem}"));
        } else if let Some(other) = prefixes.insert(prefix.clone(), name.clone()) {
            ctx.problems.add(
                &prefix_key,
                format!("the prefix `{prefix}` is already `mcp.servers.{other}`'s: give one of them `prefix = \"...\"`"),
            );
        }
        if let Some(entry) = compile_server(name, raw, &key, prefix, list_ttl, ctx) {
            entries.insert(name.clone(), entry);
        }
    }
    entries
}

/// Why `prefix` cannot be a prefix, if it cannot.
fn prefix_problem(prefix: &str) -> Option<&'static str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if prefix.is_empty() || !prefix.chars().all(allowed) {
        return Some("may use letters, digits, `_` and `-` only, and not be empty");
    }
    if prefix.contains(PREFIX_SEPARATOR) || prefix.ends_with('_') || prefix.starts_with('_') {
        // `a_` + `__x` and `a` + `___x` would both list `a___x`.
        return Some("may not contain `__` or start or end with `_` (it is followed by `__`)");
    }
    None
}

fn compile_server(
    name: &str,
    raw: &McpServerConfig,
    key: &str,
    prefix: String,
    list_ttl: Duration,
    ctx: &mut ToolCtx<'_, '_>,
) -> Option<ServerEntry> {
    let before = ctx.problems.len();
    let transport = match (&raw.url, &raw.command) {
        (Some(_), Some(_)) => {
            ctx.problems.add(
                format!("{key}.command"),
                "a server is reached by `url` (Streamable HTTP) or by `command` (stdio), not both",
            );
            None
        }
        (None, None) => {
            ctx.problems.add(
                key,
                "needs `url = \"https://host/mcp\"` (Streamable HTTP) or `command = \"...\"` (stdio)",
            );
            None
        }
        (Some(url), None) => {
            if !raw.args.is_empty() || !raw.env_from.is_empty() {
                ctx.problems
                    .add(format!("{key}.args"), "`args` and `env_from` apply to `command` servers");
            }
            match reqwest::Url::parse(url) {
                Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {
                    let headers =
                        secret_pairs(&raw.headers_env, &format!("{key}.headers_env"), ctx, true);
                    Some(Transport::Http { url: url.clone(), headers })
                }
                _ => {
                    ctx.problems.add(format!("{key}.url"), "must be an http:// or https:// URL");
                    None
                }
            }
        }
        (None, Some(command)) => {
            if !raw.headers_env.is_empty() {
                ctx.problems.add(
                    format!("{key}.headers_env"),
                    "applies to `url` servers; a stdio server gets secrets through `env_from`",
                );
            }
            if command.trim().is_empty() {
                ctx.problems.add(format!("{key}.command"), "must name a program");
            }
            let env = secret_pairs(&raw.env_from, &format!("{key}.env_from"), ctx, false);
            Some(Transport::Stdio { command: command.clone(), args: raw.args.clone(), env })
        }
    };
    let positive =
        |field: &str, value: Option<u64>, default: u64, problems: &mut Problems| match value {
            Some(0) => {
                problems.add(format!("{key}.{field}"), "must be greater than 0");
                default
            }
            Some(value) => value,
            None => default,
        };
    let timeout_ms = positive("timeout_ms", raw.timeout_ms, DEFAULT_MCP_TIMEOUT_MS, ctx.problems);
    let connect_ms = positive(
        "connect_timeout_ms",
        raw.connect_timeout_ms,
        DEFAULT_CONNECT_TIMEOUT_MS,
        ctx.problems,
    );
    let max_bytes = positive(
        "max_response_bytes",
        raw.max_response_bytes,
        DEFAULT_MAX_RESPONSE_BYTES,
        ctx.problems,
    );
    let cache_max_age_ms = match raw.cache_max_age_ms {
        Some(0) => {
            ctx.problems.add(format!("{key}.cache_max_age_ms"), "must be greater than 0");
            None
        }
        other => other.map(|ms| i64::try_from(ms).unwrap_or(i64::MAX)),
    };
    let breaker = breaker_policy(raw.breaker, key, ctx.problems);
    if ctx.problems.len() > before {
        return None;
    }
    let server = Arc::new(McpServer::new(
        name,
        transport?,
        Duration::from_millis(connect_ms),
        Duration::from_millis(timeout_ms),
        max_bytes,
        list_ttl,
    ));
    Some(ServerEntry {
        server,
        prefix,
        timeout: Duration::from_millis(timeout_ms),
        breaker,
        bulkhead: bulkhead(ctx, name),
        idempotency: raw.idempotency.unwrap_or_default(),
        cache_max_age_ms,
        queue_writes: raw.queue_writes,
    })
}

/// Name → value pairs whose values are environment variables' (secrets: redacted from
/// everything rein returns). `headers`: the names must be header names.
fn secret_pairs(
    raw: &BTreeMap<String, String>,
    key: &str,
    ctx: &mut ToolCtx<'_, '_>,
    headers: bool,
) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    for (name, var) in raw {
        let item_key = format!("{key}.{name}");
        if headers && header_name(name, &item_key, ctx.problems).is_none() {
            continue;
        }
        if let Some(secret) = env_secret(ctx, var, &item_key, headers) {
            pairs.push((name.clone(), secret));
        }
    }
    pairs
}

/// An `mcp` rung of the tool `tool`.
pub(crate) fn compile_rung(
    raw: &RungConfig,
    tool: &str,
    key: &str,
    ctx: &mut ToolCtx<'_, '_>,
) -> Option<McpRung> {
    let Some(server_name) = &raw.server else {
        ctx.problems.add(
            format!("{key}.server"),
            "is required for `mcp` rungs: the `[mcp.servers.<name>]` whose tool this is",
        );
        return None;
    };
    let Some(server) = ctx.servers.get(server_name).cloned() else {
        ctx.problems.add(
            format!("{key}.server"),
            format!("`{server_name}` is not a server: declare `[mcp.servers.{server_name}]`"),
        );
        return None;
    };
    let upstream = raw.tool.clone().unwrap_or_else(|| tool.to_string());
    if upstream.trim().is_empty() {
        ctx.problems.add(format!("{key}.tool"), "must name the server's tool");
        return None;
    }
    let bulkhead_name = raw.bulkhead.clone().unwrap_or_else(|| server_name.clone());
    if raw.bulkhead.is_some() && !ctx.declared.contains(&bulkhead_name) {
        ctx.problems.add(
            format!("{key}.bulkhead"),
            format!("`{bulkhead_name}` is not a bulkhead: declare `[bulkheads.{bulkhead_name}]` or leave it out to share the server's"),
        );
    }
    Some(McpRung { server, tool: upstream, bulkhead: bulkhead(ctx, &bulkhead_name) })
}

/// Which upstream tools configured ladders take over (every `mcp` rung's, a replica's too:
/// listed under the ladder's name only, not the server's prefix; several ladders may take one
/// tool), refusing a configured name inside a server's prefix.
pub(crate) fn taken(
    tools: &BTreeMap<String, ToolConfig>,
    servers: &BTreeMap<String, ServerEntry>,
    problems: &mut Problems,
) -> BTreeMap<(String, String), String> {
    let mut taken: BTreeMap<(String, String), String> = BTreeMap::new();
    for (name, tool) in tools {
        for entry in servers.values() {
            if name.starts_with(&format!("{}{PREFIX_SEPARATOR}", entry.prefix)) {
                problems.add(
                    format!("tools.{name}"),
                    format!(
                        "the name is inside `mcp.servers.{}`'s prefix (`{}{PREFIX_SEPARATOR}`), where that server's tools are listed: rename it",
                        entry.server.name, entry.prefix
                    ),
                );
            }
        }
        for rung in tool.rungs.iter().filter(|rung| rung.kind == RungKind::Mcp) {
            let Some(server) = &rung.server else { continue };
            let upstream = rung.tool.clone().unwrap_or_else(|| name.clone());
            taken.entry((server.clone(), upstream)).or_insert_with(|| name.clone());
        }
    }
    taken
}
