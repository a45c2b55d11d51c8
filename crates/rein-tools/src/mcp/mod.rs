//! rein in front of upstream MCP servers (`[mcp.servers.*]`). Each server's tools are listed
//! under the server's prefix (`{prefix}__{tool}`) unless an explicit `[tools.*]` ladder takes
//! one over (its `mcp` rung names the server and tool): then it is listed once, under the
//! ladder's name. A listed tool without a ladder of its own gets one here, the first time it is
//! called: the server as its primary, then the cache (reads) or the outbox (writes) when the
//! server's config asks for them, ending in the structured refusal like every ladder. Whether it
//! reads or writes comes from its annotations (`readOnlyHint: true` reads; anything else, as
//! MCP's defaults say, may write); a ladder in the config says so itself and wins.
//!
//! Lists are kept for the `ttlMs` the server gave (capped by `[mcp] list_ttl_ms`) and, while a
//! server cannot be reached, the last one is served, marked with its age.

mod upstream;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::Deadline;
use rein_core::breaker::{Cooldown, CooldownPolicy};
use rmcp::model::{JsonObject, MetaObject, Tool as McpTool, ToolAnnotations};
use serde_json::{Value, json};

use crate::config::{Fidelity, Idempotency, ToolKind};
use crate::ladder::{Bulkhead, McpRung, Rung, RungAction, Tool, Tools};
use crate::wording::Wording;

pub use upstream::IDEMPOTENCY_META_KEY;
pub(crate) use upstream::{McpServer, Transport};

/// Between a server's prefix and its tool's name in the names rein lists.
pub const PREFIX_SEPARATOR: &str = "__";

/// The `_meta` key of a listed tool that says where rein's knowledge of it came from, when that
/// is not a fresh list (the server could not be reached: `{"server", "age_ms"}`).
pub const LISTING_META_KEY: &str = "io.rein/listing";

/// A server's settings for the tools it lists without a ladder of their own.
#[derive(Debug)]
pub(crate) struct ServerEntry {
    pub server: Arc<McpServer>,
    pub prefix: String,
    pub timeout: Duration,
    pub breaker: CooldownPolicy,
    pub bulkhead: Arc<Bulkhead>,
    pub idempotency: Idempotency,
    pub cache_max_age_ms: Option<i64>,
    pub queue_writes: bool,
}

/// The compiled `[mcp]` section.
#[derive(Debug, Default)]
pub(crate) struct McpHub {
    /// By server name.
    pub servers: BTreeMap<String, ServerEntry>,
    /// (server, upstream tool) → the `[tools.*]` ladder that takes it over.
    pub taken: BTreeMap<(String, String), String>,
    /// Ladders made for listed tools on their first call, by listed name.
    made: Mutex<HashMap<String, Arc<Tool>>>,
    pub reissue_window: Duration,
}

/// What rein lists to an MCP client.
#[derive(Debug, Clone)]
pub struct ToolList {
    pub tools: Vec<McpTool>,
    /// How long the client may keep it: the shortest of the servers' lists' remaining lives.
    pub ttl_ms: u64,
}

impl McpHub {
    pub(crate) fn new(
        servers: BTreeMap<String, ServerEntry>,
        taken: BTreeMap<(String, String), String>,
        reissue_window: Duration,
    ) -> Self {
        Self { servers, taken, made: Mutex::new(HashMap::new()), reissue_window }
    }

    /// The server whose prefix starts `name`, and the tool's name there.
    fn split<'n>(&self, name: &'n str) -> Option<(&ServerEntry, &'n str)> {
        let (prefix, tool) = name.split_once(PREFIX_SEPARATOR)?;
        let entry = self.servers.values().find(|entry| entry.prefix == prefix)?;
        (!tool.is_empty()).then_some((entry, tool))
    }

    /// The ladder of a listed tool `name` (`{prefix}__{tool}`), made on its first call. The
    /// server's list says whether the tool exists and whether it reads; when the server cannot
    /// be reached and rein has never seen its list, the tool is taken to be a write (MCP's
    /// default), so nothing is ever treated as safe to repeat on a guess.
    /// `cut` bounds the list's fetch (the call's deadline cuts it; the replay worker's does
    /// not).
    pub(crate) async fn resolve(
        &self,
        name: &str,
        cut: impl Fn(Duration) -> Duration,
    ) -> Option<Arc<Tool>> {
        let (entry, upstream) = self.split(name)?;
        let server_name = entry.server.name.clone();
        if self.taken.contains_key(&(server_name, upstream.to_string())) {
            return None;
        }
        if let Some(tool) =
            self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name)
        {
            return Some(tool.clone());
        }
        let budget = cut(entry.server.connect_timeout);
        let (annotations, known) = match entry.server.list(budget).await {
            Ok(listing) => match listing.tools.iter().find(|tool| tool.name == upstream) {
                Some(tool) => (tool.annotations.clone(), true),
                None => return None,
            },
            Err((_, Some(kept))) => match kept.tools.iter().find(|tool| tool.name == upstream) {
                Some(tool) => (tool.annotations.clone(), true),
                None => return None,
            },
            Err((reason, None)) => {
                tracing::warn!(server = %entry.server.name, tool = upstream, %reason, "the server's tools are unknown: treating the tool as a write");
                (None, false)
            }
        };
        let tool = Arc::new(auto_tool(name, entry, upstream, annotations.as_ref()));
        if known {
            self.made
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(name.to_string(), tool.clone());
        }
        Some(tool)
    }

    /// Every ladder made so far, by name.
    pub(crate) fn made_all(&self) -> Vec<Arc<Tool>> {
        let made = self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut ladders: Vec<Arc<Tool>> = made.values().cloned().collect();
        ladders.sort_by(|a, b| a.name.cmp(&b.name));
        ladders
    }

    /// A ladder already made for `name`, without asking any server.
    pub(crate) fn made(&self, name: &str) -> Option<Arc<Tool>> {
        self.made.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name).cloned()
    }

    /// Every tool rein serves over MCP: the servers' (each server asked at once, within the
    /// deadline) and the configured ladders.
    pub(crate) async fn list(&self, tools: &Tools, deadline: &Deadline) -> ToolList {
        let fetches = self.servers.values().map(|entry| async move {
            let budget = deadline.cut(entry.server.connect_timeout.max(Duration::from_secs(1)));
            (entry, entry.server.list(budget).await)
        });
        let results = futures_util::future::join_all(fetches).await;
        let mut ttl = Duration::MAX;
        let mut upstream: BTreeMap<(String, String), McpTool> = BTreeMap::new();
        let mut listed = Vec::new();
        for (entry, result) in results {
            let (listing, marked) = match result {
                Ok(listing) => (listing, false),
                Err((reason, Some(kept))) => {
                    tracing::warn!(server = %entry.server.name, %reason, "serving the server's last tool list");
                    (kept, true)
                }
                Err((reason, None)) => {
                    tracing::warn!(server = %entry.server.name, %reason, "the server's tools are not listed: it cannot be reached and rein has no earlier list");
                    continue;
                }
            };
            let age = listing.fetched.elapsed();
            if marked {
                // A client should come back soon: the server may be up again.
                ttl = ttl.min(Duration::from_secs(5));
            } else {
                ttl = ttl.min(listing.ttl.saturating_sub(age));
            }
            for tool in listing.tools {
                let mut tool = tool;
                if marked {
                    mark(&mut tool, &entry.server.name, age);
                }
                let key = (entry.server.name.clone(), tool.name.to_string());
                if self.taken.contains_key(&key) {
                    upstream.insert(key, tool);
                    continue;
                }
                let name = format!("{}{PREFIX_SEPARATOR}{}", entry.prefix, tool.name);
                tool.name = name.into();
                tool.output_schema = Some(Arc::new(envelope_schema()));
                listed.push(tool);
            }
        }
        for tool in tools.values() {
            listed.push(configured(tool, &upstream));
        }
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        let ttl_ms = if ttl == Duration::MAX { 0 } else { ttl.as_millis() as u64 };
        ToolList { tools: listed, ttl_ms }
    }
}

/// Say on a listed tool that its description is the server's last list, `age` old.
fn mark(tool: &mut McpTool, server: &str, age: Duration) {
    let mut meta = tool.meta.take().unwrap_or_default();
    meta.0.insert(
        LISTING_META_KEY.to_string(),
        json!({"server": server, "from": "cache", "age_ms": age.as_millis() as u64}),
    );
    tool.meta = Some(meta);
}

/// A configured ladder as MCP lists it: its mcp primary's description and schemas when the
/// server listed them, else the config's.
fn configured(tool: &Tool, upstream: &BTreeMap<(String, String), McpTool>) -> McpTool {
    let from_server = tool.rungs.iter().find_map(|rung| match &rung.action {
        RungAction::Mcp(mcp) => upstream.get(&(mcp.server.name.clone(), mcp.tool.clone())),
        _ => None,
    });
    let mut listed = match from_server {
        Some(server_tool) => server_tool.clone(),
        None => McpTool::new(tool.name.clone(), String::new(), Arc::new(any_object())),
    };
    listed.name = tool.name.clone().into();
    if let Some(description) = &tool.description {
        listed.description = Some(description.clone().into());
    }
    if listed.description.as_deref().is_none_or(str::is_empty) {
        listed.description = Some(format!("{} (through rein)", tool.name).into());
    }
    if let Some(schema) = tool.input_schema.as_ref().and_then(Value::as_object) {
        listed.input_schema = Arc::new(schema.clone());
    }
    let mut annotations = listed.annotations.take().unwrap_or_default();
    // The config says what the tool does; the server's hints do not override it.
    // (A write keeps the server's `destructiveHint`; absent, MCP's default says destructive.)
    annotations.read_only_hint = Some(tool.kind == ToolKind::Read);
    listed.annotations = Some(annotations);
    listed.output_schema = Some(Arc::new(envelope_schema()));
    listed
}

/// `{"type": "object"}`.
fn any_object() -> JsonObject {
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema
}

/// The schema of what every tool call through rein answers in `structuredContent`: rein's
/// envelope, with the server's own structured result in `result`.
pub fn envelope_schema() -> JsonObject {
    let schema = json!({
        "type": "object",
        "properties": {
            "status": {"type": "string", "enum": ["ok", "queued", "refused", "busy", "pending_approval", "stopped"]},
            "tool": {"type": "string"},
            "result": {},
            "degraded": {"type": "boolean"},
            "fidelity": {"type": "string"},
            "source": {"type": "string"},
            "age_ms": {"type": "integer"},
            "age_minutes": {"type": "integer"},
            "detail": {"type": "string"},
            "idempotency_key": {"type": "string"},
            "hold_id": {"type": "integer"},
            "retry_after_ms": {"type": "integer"},
            "outcome_unknown": {"type": "boolean"},
            "rung": {"type": "object"},
            "elapsed_ms": {"type": "integer"}
        },
        "required": ["status", "tool"]
    });
    match schema {
        Value::Object(map) => map,
        _ => unreachable!("the schema is an object"),
    }
}

/// The ladder of a listed tool without one in the config.
fn auto_tool(
    name: &str,
    entry: &ServerEntry,
    upstream: &str,
    annotations: Option<&ToolAnnotations>,
) -> Tool {
    let reads = annotations.and_then(|a| a.read_only_hint) == Some(true);
    let kind = if reads { ToolKind::Read } else { ToolKind::Write };
    let mut rungs = vec![Rung {
        index: 0,
        source: entry.server.name.clone(),
        fidelity: Fidelity::Exact,
        timeout: entry.timeout,
        breaker: Some(Cooldown::new(entry.breaker)),
        action: RungAction::Mcp(McpRung {
            server: entry.server.clone(),
            tool: upstream.to_string(),
            bulkhead: entry.bulkhead.clone(),
        }),
    }];
    match (kind, entry.cache_max_age_ms, entry.queue_writes) {
        (ToolKind::Read, Some(max_age_ms), _) => rungs.push(Rung {
            index: 1,
            source: "cache".into(),
            fidelity: Fidelity::Stale,
            timeout: Duration::from_millis(crate::config::compile::DEFAULT_CACHE_TIMEOUT_MS),
            breaker: Some(Cooldown::new(crate::config::compile::DEFAULT_BREAKER)),
            action: RungAction::Cache { max_age_ms },
        }),
        (ToolKind::Write, _, true) => rungs.push(Rung {
            index: 1,
            source: "outbox".into(),
            fidelity: Fidelity::Deferred,
            timeout: Duration::from_millis(crate::config::compile::DEFAULT_QUEUE_TIMEOUT_MS),
            breaker: None,
            action: RungAction::Queue,
        }),
        _ => {}
    }
    let budgets: Duration = rungs.iter().map(|rung| rung.timeout).sum();
    Tool {
        name: name.to_string(),
        kind,
        rungs,
        gates: Vec::new(),
        key_from: None,
        idempotency: if kind == ToolKind::Write { entry.idempotency } else { Idempotency::Review },
        lookup: None,
        wording: Wording::default(),
        key_lease: budgets + crate::config::compile::KEY_LEASE_MARGIN,
        evidence: None,
        description: None,
        input_schema: None,
    }
}

/// A listed meta object (for tests and the gateway).
pub fn listing_meta(tool: &McpTool) -> Option<&Value> {
    tool.meta.as_ref().and_then(|meta: &MetaObject| meta.0.get(LISTING_META_KEY))
}
