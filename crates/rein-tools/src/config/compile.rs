//! Validation: `ToolsConfig` → the ladders the dispatcher walks, collecting every problem with
//! the key it is at and the fix. The rules that keep a ladder honest live here: writes never
//! substitute (no cache or static rung), reads never defer (no queue rung), a queue rung is last
//! and after the primary it defers, every http rung has its own budget, every cache rung its
//! staleness budget.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use rein_core::breaker::{Cooldown, CooldownPolicy};
use rein_core::problems::Problems;
use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use super::{
    BodyMode, ConfigError, Fidelity, Idempotency, LookupConfig, RungConfig, RungKind, ToolConfig,
    ToolKind, ToolsConfig,
};
use crate::gate::Gate;
use crate::http::{IDEMPOTENCY_KEY_HEADER, UrlTemplate};
use crate::ladder::{Bulkhead, HttpRung, Lookup, OutboxSettings, Rung, RungAction, Tool, Tools};
use crate::mcp::{McpHub, McpServer};
use crate::redact::Redactor;
use crate::wording::Wording;

/// Looks up an environment variable (injected, so tests need no process environment).
pub(crate) type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(crate) const DEFAULT_BREAKER: CooldownPolicy =
    CooldownPolicy { allowed_fails: 5, cooldown: Duration::from_secs(30) };
pub(crate) const DEFAULT_CACHE_TIMEOUT_MS: u64 = 100;
pub(crate) const DEFAULT_QUEUE_TIMEOUT_MS: u64 = 1_000;
/// The default `max_response_bytes`: 1 MiB, far above a tool result a model can use.
pub(crate) const DEFAULT_MAX_RESPONSE_BYTES: u64 = 1024 * 1024;
/// Added to a write ladder's budgets for its key's lease, so a live request is never taken over.
pub(crate) const KEY_LEASE_MARGIN: Duration = Duration::from_secs(5);

/// The validated tools section, compiled: what a [`Dispatcher`](crate::Dispatcher) runs. Made
/// once, by [`ToolsConfig::compile`], when the config is validated; its breakers and bulkheads
/// start with it, so a reload (a new plan) starts them afresh.
#[derive(Debug)]
pub struct ToolsPlan {
    pub(crate) tools: Tools,
    pub(crate) outbox: OutboxSettings,
    /// The upstream MCP servers and the ladders made for their tools.
    pub(crate) mcp: McpHub,
    /// Every secret header value the tools send, to redact from what backends say.
    pub(crate) redactor: Redactor,
}

/// Validate `config` and build its ladders. `env` resolves `headers_env`; `None` checks
/// everything but whether the variables are set.
pub(crate) fn compile(
    config: &ToolsConfig,
    env: Option<EnvLookup<'_>>,
) -> Result<ToolsPlan, ConfigError> {
    let mut problems = Problems::new();

    let mut bulkheads: BTreeMap<String, Arc<Bulkhead>> = BTreeMap::new();
    for (name, bulkhead) in &config.bulkheads {
        if bulkhead.max_concurrent == 0 {
            problems.add(
                format!("bulkheads.{name}.max_concurrent"),
                "must be at least 1 (a partition that admits nothing is a dead tool)",
            );
        }
        bulkheads.insert(
            name.clone(),
            Arc::new(Bulkhead::new(name, bulkhead.max_concurrent, bulkhead.retry_after_ms)),
        );
    }
    let declared: BTreeSet<String> = bulkheads.keys().cloned().collect();

    let outbox = &config.outbox;
    if outbox.lease_ms == 0 {
        problems.add("outbox.lease_ms", "must be greater than 0");
    }
    if outbox.backoff_base_ms == 0 {
        problems.add("outbox.backoff_base_ms", "must be greater than 0");
    }
    if outbox.backoff_cap_ms < outbox.backoff_base_ms {
        problems.add(
            "outbox.backoff_cap_ms",
            format!(
                "({}) is less than `outbox.backoff_base_ms` ({})",
                outbox.backoff_cap_ms, outbox.backoff_base_ms
            ),
        );
    }
    for (key, value) in [
        ("outbox.keys_retain_ms", outbox.keys_retain_ms),
        ("outbox.cache_retain_ms", outbox.cache_retain_ms),
    ] {
        if value < MIN_RETAIN_MS {
            problems.add(
                key,
                format!("must be at least {MIN_RETAIN_MS} (one hour): a key forgotten sooner lets a late retry run again"),
            );
        }
    }
    if outbox.batch == 0 {
        problems.add("outbox.batch", "must be at least 1");
    }

    let mut tools = Tools::new();
    let mut redactor = Redactor::default();
    let mut ctx = ToolCtx {
        problems: &mut problems,
        bulkheads: &mut bulkheads,
        declared: &declared,
        env,
        secrets: &mut redactor,
        servers: BTreeMap::new(),
    };
    let servers = super::mcp::compile_servers(&config.mcp, &mut ctx);
    ctx.servers =
        servers.iter().map(|(name, entry)| (name.clone(), entry.server.clone())).collect();
    for (name, tool) in &config.tools {
        if let Some(compiled) = compile_tool(name, tool, &mut ctx) {
            tools.insert(name.clone(), Arc::new(compiled));
        }
    }
    let taken = super::mcp::taken(&config.tools, &servers, ctx.problems);
    let reissue_window = Duration::from_millis(config.mcp.reissue_window_ms);
    let mcp = McpHub::new(servers, taken, reissue_window);

    problems.into_result()?;
    Ok(ToolsPlan {
        tools,
        mcp,
        redactor,
        outbox: OutboxSettings {
            lease: Duration::from_millis(outbox.lease_ms),
            backoff_base: Duration::from_millis(outbox.backoff_base_ms),
            backoff_cap: Duration::from_millis(outbox.backoff_cap_ms),
            batch: outbox.batch,
            keys_retain: Duration::from_millis(outbox.keys_retain_ms),
            cache_retain: Duration::from_millis(outbox.cache_retain_ms),
        },
    })
}

/// The shortest retention accepted for keys and cache entries.
const MIN_RETAIN_MS: u64 = 3_600_000;

pub(crate) struct ToolCtx<'a, 'e> {
    pub(crate) problems: &'a mut Problems,
    /// Declared partitions, plus the ones made for rungs without `bulkhead` (one per source).
    pub(crate) bulkheads: &'a mut BTreeMap<String, Arc<Bulkhead>>,
    pub(crate) declared: &'a BTreeSet<String>,
    pub(crate) env: Option<EnvLookup<'e>>,
    /// Collects the secret header values.
    pub(crate) secrets: &'a mut Redactor,
    /// The upstream MCP servers, by name, for mcp rungs.
    pub(crate) servers: BTreeMap<String, Arc<McpServer>>,
}

fn compile_tool(name: &str, raw: &ToolConfig, ctx: &mut ToolCtx<'_, '_>) -> Option<Tool> {
    let key = format!("tools.{name}");
    let before = ctx.problems.len();
    if name.is_empty()
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        ctx.problems.add(
            &key,
            "a tool name may use letters, digits, `_`, `-` and `.` only (it appears in URLs and metrics)",
        );
    }
    if raw.rungs.is_empty() {
        ctx.problems.add(
            format!("{key}.rungs"),
            "a tool needs at least one rung: add `[[tools.<name>.rungs]]` with `kind = \"http\"`",
        );
    }
    if raw.kind == ToolKind::Read {
        if raw.idempotency.is_some() {
            ctx.problems.add(
                format!("{key}.idempotency"),
                "only applies to write tools: reads are safe to repeat",
            );
        }
        if raw.key_from.is_some() {
            ctx.problems.add(
                format!("{key}.key_from"),
                "only applies to write tools: reads are safe to repeat and carry no key",
            );
        }
        if !raw.gate.is_empty() {
            ctx.problems.add(format!("{key}.gate"), "only applies to write tools");
        }
    }
    let gates: Vec<Gate> = raw
        .gate
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| Gate::compile(rule, &format!("{key}.gate[{i}]"), ctx.problems))
        .collect();
    let wording = Wording::compile(&raw.detail, &format!("{key}.detail"), ctx.problems);
    if let Some(evidence) = &raw.evidence {
        let pointers = [
            ("items_at", Some(evidence.items_at.as_str())),
            ("id_at", Some(evidence.id_at.as_str())),
            ("text_at", evidence.text_at.as_deref()),
        ];
        for (field, pointer) in pointers {
            if let Some(pointer) = pointer
                && !pointer.is_empty()
                && !pointer.starts_with('/')
            {
                ctx.problems.add(
                    format!("{key}.evidence.{field}"),
                    format!("must be a JSON Pointer starting with `/` (got `{pointer}`)"),
                );
            }
        }
        if evidence.id_at.is_empty() {
            ctx.problems
                .add(format!("{key}.evidence.id_at"), "must point at each item's id, e.g. `/id`");
        }
    }

    let mut rungs = Vec::new();
    let mut sources = BTreeSet::new();
    let mut seen_http = false;
    for (index, rung) in raw.rungs.iter().enumerate() {
        let rung_key = format!("{key}.rungs[{index}]");
        if rung.source.trim().is_empty() {
            ctx.problems.add(
                format!("{rung_key}.source"),
                "must name the rung (metrics and provenance show it)",
            );
        } else if !sources.insert(rung.source.clone()) {
            ctx.problems.add(
                format!("{rung_key}.source"),
                format!("`{}` is already the source of an earlier rung of this tool", rung.source),
            );
        }
        check_kind(raw.kind, rung.kind, index, raw.rungs.len(), seen_http, &rung_key, ctx.problems);
        if let Some(compiled) = compile_rung(rung, index, !seen_http, &rung_key, ctx) {
            rungs.push(compiled);
        }
        seen_http |= matches!(rung.kind, RungKind::Http | RungKind::Mcp);
    }

    let idempotency = raw.idempotency.unwrap_or_default();
    let lookup = match (idempotency, &raw.lookup) {
        (Idempotency::Lookup, Some(lookup)) => {
            compile_lookup(lookup, name, &format!("{key}.lookup"), ctx)
        }
        (Idempotency::Lookup, None) => {
            ctx.problems.add(
                format!("{key}.lookup"),
                "is required with `idempotency = \"lookup\"`: the request that finds an earlier result (e.g. `url = \"https://tickets/api/tickets?conversation={conversation_id}\"`)",
            );
            None
        }
        (_, Some(_)) => {
            ctx.problems.add(
                format!("{key}.lookup"),
                format!(
                    "only applies with `idempotency = \"lookup\"` (this tool's is `{}`)",
                    idempotency.as_str()
                ),
            );
            None
        }
        (_, None) => None,
    };

    if ctx.problems.len() > before {
        return None;
    }
    let budgets: Duration = rungs.iter().map(|rung| rung.timeout).sum::<Duration>()
        + lookup.as_ref().map_or(Duration::ZERO, |lookup| lookup.timeout * 2);
    Some(Tool {
        name: name.to_string(),
        kind: raw.kind,
        rungs,
        gates,
        key_from: raw.key_from,
        idempotency,
        lookup,
        wording,
        key_lease: budgets + KEY_LEASE_MARGIN,
        evidence: raw.evidence.clone(),
        description: raw.description.clone(),
        input_schema: raw.input_schema.clone(),
    })
}

fn compile_lookup(
    raw: &LookupConfig,
    tool: &str,
    key: &str,
    ctx: &mut ToolCtx<'_, '_>,
) -> Option<Lookup> {
    let before = ctx.problems.len();
    let timeout_ms = match raw.timeout_ms {
        None => {
            ctx.problems.add(
                format!("{key}.timeout_ms"),
                "is required: size the lookup's own budget (it runs before every resend)",
            );
            0
        }
        Some(0) => {
            ctx.problems.add(format!("{key}.timeout_ms"), "must be greater than 0");
            0
        }
        Some(ms) => ms,
    };
    if !raw.found_at.is_empty() && !raw.found_at.starts_with('/') {
        ctx.problems.add(
            format!("{key}.found_at"),
            format!("must be a JSON Pointer starting with `/` (got `{}`)", raw.found_at),
        );
    }
    let spec = Request {
        method: raw.method.as_deref(),
        default_method: Method::GET,
        url: Some(&raw.url),
        headers: &raw.headers,
        headers_env: &raw.headers_env,
        body: raw.body,
        max_response_bytes: raw.max_response_bytes,
        bulkhead: None,
        default_bulkhead: format!("{tool}.lookup"),
    };
    let http = compile_request(&spec, key, ctx);
    if ctx.problems.len() > before {
        return None;
    }
    Some(Lookup {
        http: http?,
        timeout: Duration::from_millis(timeout_ms),
        found_at: raw.found_at.clone(),
    })
}

fn check_kind(
    tool: ToolKind,
    rung: RungKind,
    index: usize,
    count: usize,
    seen_http: bool,
    key: &str,
    problems: &mut Problems,
) {
    let kind_key = format!("{key}.kind");
    match (tool, rung) {
        (ToolKind::Write, RungKind::Cache | RungKind::Static) => problems.add(
            kind_key,
            format!(
                "a write tool cannot have a `{}` rung: writes never substitute; defer with a final `queue` rung instead",
                if rung == RungKind::Cache { "cache" } else { "static" }
            ),
        ),
        (ToolKind::Read, RungKind::Queue) => problems.add(
            kind_key,
            "a read tool cannot have a `queue` rung: reads degrade (cache, static) or refuse; only writes defer",
        ),
        (ToolKind::Write, RungKind::Queue) if !seen_http => problems.add(
            kind_key,
            "a `queue` rung must come after at least one `http` or `mcp` rung (the primary it defers to)",
        ),
        (ToolKind::Write, RungKind::Queue) if index + 1 != count => problems.add(
            kind_key,
            "a `queue` rung must be the last rung: nothing can follow a deferral",
        ),
        _ => {}
    }
}

fn compile_rung(
    raw: &RungConfig,
    index: usize,
    first_http: bool,
    key: &str,
    ctx: &mut ToolCtx<'_, '_>,
) -> Option<Rung> {
    let before = ctx.problems.len();
    let tool_name = key.trim_start_matches("tools.").split(".rungs[").next().unwrap_or_default();
    let kind_name = match raw.kind {
        RungKind::Http => "http",
        RungKind::Cache => "cache",
        RungKind::Static => "static",
        RungKind::Queue => "queue",
        RungKind::Mcp => "mcp",
    };
    let is_http = raw.kind == RungKind::Http;
    let is_mcp = raw.kind == RungKind::Mcp;
    let only = |field: &str, present: bool, allowed: bool, kinds: &str, problems: &mut Problems| {
        if present && !allowed {
            problems.add(
                format!("{key}.{field}"),
                format!("only applies to {kinds} rungs, not `{kind_name}`"),
            );
        }
    };
    only("method", raw.method.is_some(), is_http, "`http`", ctx.problems);
    only("url", raw.url.is_some(), is_http, "`http`", ctx.problems);
    only("headers", !raw.headers.is_empty(), is_http, "`http`", ctx.problems);
    only("headers_env", !raw.headers_env.is_empty(), is_http, "`http`", ctx.problems);
    only("body", raw.body.is_some(), is_http, "`http`", ctx.problems);
    only("bulkhead", raw.bulkhead.is_some(), is_http || is_mcp, "`http` and `mcp`", ctx.problems);
    only("max_response_bytes", raw.max_response_bytes.is_some(), is_http, "`http`", ctx.problems);
    only("server", raw.server.is_some(), is_mcp, "`mcp`", ctx.problems);
    only("tool", raw.tool.is_some(), is_mcp, "`mcp`", ctx.problems);
    let breakable = matches!(raw.kind, RungKind::Http | RungKind::Cache | RungKind::Mcp);
    only("breaker", raw.breaker.is_some(), breakable, "`http`, `mcp` and `cache`", ctx.problems);
    only(
        "max_age_ms",
        raw.max_age_ms.is_some(),
        raw.kind == RungKind::Cache,
        "`cache`",
        ctx.problems,
    );
    only("result", raw.result.is_some(), raw.kind == RungKind::Static, "`static`", ctx.problems);
    only(
        "timeout_ms",
        raw.timeout_ms.is_some(),
        raw.kind != RungKind::Static,
        "`http`, `cache` and `queue`",
        ctx.problems,
    );

    let fidelity = match (raw.kind, raw.fidelity) {
        (RungKind::Queue, None | Some(Fidelity::Deferred)) => Fidelity::Deferred,
        (RungKind::Queue, Some(_)) => {
            ctx.problems.add(format!("{key}.fidelity"), "a `queue` rung's fidelity is `deferred`");
            Fidelity::Deferred
        }
        (_, Some(Fidelity::Deferred)) => {
            ctx.problems.add(
                format!("{key}.fidelity"),
                "`deferred` is the fidelity of a `queue` rung only: an answer that came back is not deferred",
            );
            Fidelity::Deferred
        }
        (_, Some(fidelity)) => fidelity,
        (RungKind::Http | RungKind::Mcp, None) if first_http => Fidelity::Exact,
        (RungKind::Http | RungKind::Mcp, None) => Fidelity::Fresh,
        (RungKind::Cache, None) => Fidelity::Stale,
        (RungKind::Static, None) => Fidelity::Partial,
    };

    let timeout_ms = match (raw.kind, raw.timeout_ms) {
        (RungKind::Http, None) => {
            ctx.problems.add(
                format!("{key}.timeout_ms"),
                "is required for `http` rungs: size the rung's own budget (a fallback must not inherit the primary's)",
            );
            0
        }
        (_, Some(0)) => {
            ctx.problems.add(format!("{key}.timeout_ms"), "must be greater than 0");
            0
        }
        (_, Some(ms)) => ms,
        (RungKind::Mcp, None) => match raw.server.as_ref().and_then(|s| ctx.servers.get(s)) {
            Some(server) => server.default_timeout.as_millis() as u64,
            None => super::mcp::DEFAULT_MCP_TIMEOUT_MS,
        },
        (RungKind::Cache, None) => DEFAULT_CACHE_TIMEOUT_MS,
        (RungKind::Queue, None) => DEFAULT_QUEUE_TIMEOUT_MS,
        (RungKind::Static, None) => 0,
    };

    let breaker = breakable.then(|| Cooldown::new(breaker_policy(raw.breaker, key, ctx.problems)));

    let action = match raw.kind {
        RungKind::Http => compile_http(raw, key, ctx).map(RungAction::Http),
        RungKind::Mcp => super::mcp::compile_rung(raw, tool_name, key, ctx).map(RungAction::Mcp),
        RungKind::Cache => match raw.max_age_ms {
            Some(0) => {
                ctx.problems.add(format!("{key}.max_age_ms"), "must be greater than 0");
                None
            }
            Some(ms) => {
                Some(RungAction::Cache { max_age_ms: i64::try_from(ms).unwrap_or(i64::MAX) })
            }
            None => {
                ctx.problems.add(
                    format!("{key}.max_age_ms"),
                    "is required for `cache` rungs: the staleness budget past which the rung declines",
                );
                None
            }
        },
        RungKind::Static => match &raw.result {
            Some(result) => Some(RungAction::Static { result: result.clone() }),
            None => {
                ctx.problems.add(
                    format!("{key}.result"),
                    "is required for `static` rungs: the canned result, in the primary's shape",
                );
                None
            }
        },
        RungKind::Queue => Some(RungAction::Queue),
    };

    if ctx.problems.len() > before {
        return None;
    }
    Some(Rung {
        index,
        source: raw.source.clone(),
        fidelity,
        timeout: Duration::from_millis(timeout_ms),
        breaker,
        action: action?,
    })
}

fn compile_http(raw: &RungConfig, key: &str, ctx: &mut ToolCtx<'_, '_>) -> Option<HttpRung> {
    let spec = Request {
        method: raw.method.as_deref(),
        default_method: Method::POST,
        url: raw.url.as_deref(),
        headers: &raw.headers,
        headers_env: &raw.headers_env,
        body: raw.body,
        max_response_bytes: raw.max_response_bytes,
        bulkhead: raw.bulkhead.as_deref(),
        default_bulkhead: raw.source.clone(),
    };
    compile_request(&spec, key, ctx)
}

/// The parts of an http request in the config (an http rung's, a lookup's).
struct Request<'a> {
    method: Option<&'a str>,
    default_method: Method,
    url: Option<&'a str>,
    headers: &'a BTreeMap<String, String>,
    headers_env: &'a BTreeMap<String, String>,
    body: Option<BodyMode>,
    max_response_bytes: Option<u64>,
    bulkhead: Option<&'a str>,
    default_bulkhead: String,
}

fn compile_request(raw: &Request<'_>, key: &str, ctx: &mut ToolCtx<'_, '_>) -> Option<HttpRung> {
    let before = ctx.problems.len();
    let method = match raw.method.map(str::to_ascii_uppercase).as_deref() {
        None => raw.default_method.clone(),
        Some("POST") => Method::POST,
        Some("GET") => Method::GET,
        Some("PUT") => Method::PUT,
        Some("PATCH") => Method::PATCH,
        Some("DELETE") => Method::DELETE,
        Some(other) => {
            ctx.problems.add(
                format!("{key}.method"),
                format!("`{other}` is not supported: use GET, POST, PUT, PATCH or DELETE"),
            );
            Method::POST
        }
    };
    let url = match raw.url {
        Some(url) => UrlTemplate::parse(url, &format!("{key}.url"), ctx.problems),
        None => {
            ctx.problems.add(
                format!("{key}.url"),
                "is required for `http` rungs (e.g. \"http://127.0.0.1:9000/search/{q}\")",
            );
            None
        }
    };

    let mut headers = HeaderMap::new();
    for (name, value) in raw.headers {
        let header_key = format!("{key}.headers.{name}");
        let Some(name) = header_name(name, &header_key, ctx.problems) else { continue };
        match HeaderValue::from_str(value) {
            Ok(value) => {
                headers.insert(name, value);
            }
            Err(_) => ctx.problems.add(header_key, "is not a valid header value"),
        }
    }
    for (name, var) in raw.headers_env {
        let header_key = format!("{key}.headers_env.{name}");
        let Some(name) = header_name(name, &header_key, ctx.problems) else { continue };
        let Some(secret) = env_secret(ctx, var, &header_key, true) else { continue };
        if let Ok(mut value) = HeaderValue::from_str(&secret) {
            value.set_sensitive(true);
            headers.insert(name, value);
        }
    }

    let bulkhead_name = raw.bulkhead.map_or_else(|| raw.default_bulkhead.clone(), str::to_string);
    if raw.bulkhead.is_some() && !ctx.declared.contains(&bulkhead_name) {
        ctx.problems.add(
            format!("{key}.bulkhead"),
            format!("`{bulkhead_name}` is not a bulkhead: declare `[bulkheads.{bulkhead_name}]` or leave it out to get one named after the source"),
        );
    }
    let bulkhead = bulkhead(ctx, &bulkhead_name);

    let body_args = match raw.body {
        Some(BodyMode::Args) => true,
        Some(BodyMode::None) => false,
        None => method != Method::GET,
    };
    let max_response_bytes = match raw.max_response_bytes {
        Some(0) => {
            ctx.problems.add(
                format!("{key}.max_response_bytes"),
                "must be greater than 0 (default 1048576, 1 MiB)",
            );
            0
        }
        Some(bytes) => bytes,
        None => DEFAULT_MAX_RESPONSE_BYTES,
    };
    if ctx.problems.len() > before {
        return None;
    }
    Some(HttpRung { method, url: url?, headers, body_args, bulkhead, max_response_bytes })
}

/// A breaker's policy from its config at `key` (the default when absent), its problems noted.
pub(crate) fn breaker_policy(
    raw: Option<super::BreakerConfig>,
    key: &str,
    problems: &mut Problems,
) -> CooldownPolicy {
    let Some(breaker) = raw else { return DEFAULT_BREAKER };
    if breaker.failures == 0 {
        problems.add(format!("{key}.breaker.failures"), "must be at least 1");
    }
    if breaker.cooldown_ms == 0 {
        problems.add(format!("{key}.breaker.cooldown_ms"), "must be greater than 0");
    }
    CooldownPolicy {
        allowed_fails: breaker.failures,
        cooldown: Duration::from_millis(breaker.cooldown_ms),
    }
}

/// The secret in environment variable `var` (named at `key`), added to what is redacted; `None`
/// with a problem when it is not set (or, for a `header`, not a valid header value), and `None`
/// without one when the environment is not being checked. Never echoes the value.
pub(crate) fn env_secret(
    ctx: &mut ToolCtx<'_, '_>,
    var: &str,
    key: &str,
    header: bool,
) -> Option<String> {
    if var.trim().is_empty() {
        ctx.problems.add(key, "must name an environment variable");
        return None;
    }
    let env = ctx.env?;
    let Some(secret) = env(var).filter(|value| !value.is_empty()) else {
        ctx.problems.add(key, format!("environment variable `{var}` is not set"));
        return None;
    };
    if header && HeaderValue::from_str(&secret).is_err() {
        ctx.problems
            .add(key, format!("environment variable `{var}` does not hold a valid header value"));
        return None;
    }
    ctx.secrets.add(&secret);
    Some(secret)
}

/// The partition `name`: declared, or made with the defaults (shared by every rung naming it).
pub(crate) fn bulkhead(ctx: &mut ToolCtx<'_, '_>, name: &str) -> Arc<Bulkhead> {
    ctx.bulkheads
        .entry(name.to_string())
        .or_insert_with(|| {
            let defaults = super::BulkheadConfig::default();
            Arc::new(Bulkhead::new(name, defaults.max_concurrent, defaults.retry_after_ms))
        })
        .clone()
}

pub(crate) fn header_name(name: &str, key: &str, problems: &mut Problems) -> Option<HeaderName> {
    if name.eq_ignore_ascii_case(IDEMPOTENCY_KEY_HEADER) {
        problems.add(key, "rein sets `Idempotency-Key` itself on writes: remove it here");
        return None;
    }
    match HeaderName::from_bytes(name.as_bytes()) {
        Ok(name) => Some(name),
        Err(_) => {
            problems.add(key, format!("`{name}` is not a valid header name"));
            None
        }
    }
}
