//! The tools' config: `[bulkheads.*]`, `[tools.*]` with their ladders of rungs, gates and wording,
//! and `[outbox]` (the replay worker's lease and backoff), as serde structs that deny unknown
//! keys and keep durations in milliseconds. [`ToolsConfig::compile`] validates them, with errors
//! that name the key, into the ladders a [`crate::Dispatcher`] runs (a [`ToolsPlan`]).
//!
//! These are rein.toml's tables; `rein-runtime`, the one crate that reads the file, hands them
//! over already parsed.

pub(crate) mod compile;
mod mcp;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use compile::ToolsPlan;
pub(crate) use compile::compile;

/// Every tool, its ladder and the concurrency partitions they share.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Concurrency partitions, one per dependency. A rung without `bulkhead` gets a partition
    /// named after its `source` (declared here or, if not, with the defaults).
    #[serde(default)]
    pub bulkheads: BTreeMap<String, BulkheadConfig>,
    #[serde(default)]
    pub tools: BTreeMap<String, ToolConfig>,
    #[serde(default)]
    pub outbox: OutboxConfig,
    /// Upstream MCP servers (`[mcp]`), whose tools rein serves at the gateway's MCP endpoint.
    #[serde(default)]
    pub mcp: McpConfig,
}

/// `[mcp]`: the upstream MCP servers rein aggregates, each tool call through its ladder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// How long an upstream's `tools/list` is kept when the server gives no `ttlMs` (and the
    /// longest rein keeps one it gave). A list past it is fetched again; while the server is
    /// down the last one is served, marked.
    #[serde(default = "default_list_ttl_ms")]
    pub list_ttl_ms: u64,
    /// A write called again by the same caller with the same tool and arguments within this
    /// window, without a key of its own, is the re-issue of a call whose stream broke (MCP
    /// 2026-07-28 makes clients re-issue with a new request id): it gets the first call's
    /// idempotency key, so it is answered from the stored result or "still in flight" and never
    /// executes twice. 0 turns the recognition off.
    #[serde(default = "default_reissue_window_ms")]
    pub reissue_window_ms: u64,
    /// The servers, by name.
    #[serde(default)]
    pub servers: BTreeMap<String, McpServerConfig>,
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            list_ttl_ms: default_list_ttl_ms(),
            reissue_window_ms: default_reissue_window_ms(),
            servers: BTreeMap::new(),
        }
    }
}

fn default_list_ttl_ms() -> u64 {
    60_000
}

fn default_reissue_window_ms() -> u64 {
    600_000
}

/// One upstream MCP server: Streamable HTTP (`url`) or stdio (`command`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's Streamable HTTP endpoint (`https://host/mcp`).
    #[serde(default)]
    pub url: Option<String>,
    /// Header name → environment variable holding its value (a secret; never logged or echoed).
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// A stdio server: the program rein starts, and its arguments.
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Variable name → environment variable of rein's whose value the stdio server gets (the
    /// server gets no other variables of rein's but `PATH`).
    #[serde(default)]
    pub env_from: BTreeMap<String, String>,
    /// Its tools are listed as `{prefix}__{tool}` (default: the server's name), except those an
    /// explicit `[tools.*]` ladder takes over.
    #[serde(default)]
    pub prefix: Option<String>,
    /// The budget of one call to it, for tools without a ladder of their own (default 10 s).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The budget of connecting (and the handshake), within a call's own budget (default 5 s).
    #[serde(default)]
    pub connect_timeout_ms: Option<u64>,
    /// The largest answer read (default 1 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// The breaker of its tools without a ladder of their own (default 5 failures, 30 s).
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
    /// For its write tools without a ladder of their own: how a resend after an unknown
    /// outcome is kept from duplicating (`key` when the server honours the idempotency key
    /// rein sends in `_meta`; default `none`: held for review).
    #[serde(default)]
    pub idempotency: Option<Idempotency>,
    /// For its read tools without a ladder of their own: a cache rung this old at most.
    #[serde(default)]
    pub cache_max_age_ms: Option<u64>,
    /// For its write tools without a ladder of their own: queue them in the outbox when the
    /// server is down.
    #[serde(default)]
    pub queue_writes: bool,
}

/// One concurrency partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BulkheadConfig {
    /// Calls in flight at once; the next one gets `busy` at once.
    #[serde(default = "default_max_concurrent")]
    pub max_concurrent: u32,
    /// What `busy` tells the caller to wait before retrying.
    #[serde(default = "default_retry_after_ms")]
    pub retry_after_ms: u64,
}

impl Default for BulkheadConfig {
    fn default() -> Self {
        Self { max_concurrent: default_max_concurrent(), retry_after_ms: default_retry_after_ms() }
    }
}

fn default_max_concurrent() -> u32 {
    32
}

fn default_retry_after_ms() -> u64 {
    250
}

/// Whether a tool reads (its ladder may degrade) or writes (its ladder may only defer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    Read,
    Write,
}

/// Where a write's idempotency key comes from when the caller sends none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyFrom {
    /// `"{tool}:{conversation_id}"`: one conversation performs the write at most once.
    Conversation,
}

/// How a write tool prevents a duplicate when an earlier send's outcome is unknown (it may have
/// executed: a timeout after sending, a 5xx, a dropped connection). rein's exactly-once promise
/// rests on the guard declared here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Idempotency {
    /// `"key"`: the backend honours `Idempotency-Key`, so rein resends with the same key.
    #[serde(rename = "key")]
    Key,
    /// `"lookup"`: before every resend of an unknown outcome rein runs the tool's `lookup`
    /// request; a result found there is recorded as the write's, and nothing is sent.
    #[serde(rename = "lookup")]
    Lookup,
    /// `"none"` (the default, the only one that assumes nothing of the backend): an unknown
    /// outcome is held in the outbox for a person's review and never resent on its own.
    #[default]
    #[serde(rename = "none")]
    Review,
}

impl Idempotency {
    pub fn as_str(self) -> &'static str {
        match self {
            Idempotency::Key => "key",
            Idempotency::Lookup => "lookup",
            Idempotency::Review => "none",
        }
    }
}

/// The request a `lookup` tool runs before resending a write whose outcome is unknown: it
/// finds the result of an earlier execution (by key or by conversation), if there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupConfig {
    /// `GET` (default), `POST`, `PUT`, `PATCH` or `DELETE`.
    #[serde(default)]
    pub method: Option<String>,
    /// The URL: `{name}` is filled from the write's top-level argument `name`, and
    /// `{idempotency_key}` and `{conversation_id}` from the write's key and conversation.
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Header name → environment variable holding its value (a secret; never logged).
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// `args` or `none` (default: none for `GET`, args otherwise).
    #[serde(default)]
    pub body: Option<BodyMode>,
    /// The lookup's own budget (required).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The largest response body read (default 1 MiB).
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// A JSON Pointer to the earlier result in the lookup's 2xx answer (default: the whole
    /// answer). Absent, `null`, `[]`, `{}` or `""` there, or a 404: nothing was found, and the
    /// write is sent. Any other answer (a failure, a timeout) sends nothing this time.
    #[serde(default)]
    pub found_at: String,
}

/// One tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolConfig {
    pub kind: ToolKind,
    /// The ladder, best fidelity first. The terminal structured refusal is implicit.
    #[serde(default)]
    pub rungs: Vec<RungConfig>,
    /// Rules that hold a write for a person's approval (writes only). Checked in code on the
    /// arguments; nothing the model says lifts them.
    #[serde(default)]
    pub gate: Vec<GateRule>,
    /// Derive the idempotency key when the caller sends none (writes only).
    #[serde(default)]
    pub key_from: Option<KeyFrom>,
    /// How duplicates are prevented when a send's outcome is unknown (writes only; default
    /// `"none"`: held for review).
    #[serde(default)]
    pub idempotency: Option<Idempotency>,
    /// The request `idempotency = "lookup"` runs before a resend.
    #[serde(default)]
    pub lookup: Option<LookupConfig>,
    /// Wording overrides for the `detail` sentence.
    #[serde(default)]
    pub detail: DetailConfig,
    /// What the tool does, for MCP clients' `tools/list` (an mcp-backed tool without one gets
    /// its server's description).
    #[serde(default)]
    pub description: Option<String>,
    /// The JSON Schema of its arguments, for MCP clients' `tools/list` (default: its server's
    /// for an mcp-backed tool, else any object).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// How this tool's results become evidence for the business rules of model calls in the
    /// same run (e.g. "every cited article was returned by search in this run").
    #[serde(default)]
    pub evidence: Option<EvidenceConfig>,
}

/// Where the evidence items are in a tool's result. Pointers are JSON Pointers (RFC 6901).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvidenceConfig {
    /// The evidence source name rules refer to (`source = "search"` in a rule); default: the
    /// tool's name.
    #[serde(default)]
    pub source: Option<String>,
    /// An array of items in the result; empty (the default): the result is one item.
    #[serde(default)]
    pub items_at: String,
    /// Each item's id (a string or a number).
    pub id_at: String,
    /// Each item's text, for rules that search it; absent: no text.
    #[serde(default)]
    pub text_at: Option<String>,
}

/// What a rung calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RungKind {
    /// A backend over HTTP.
    Http,
    /// The last good result of this tool for the same arguments (reads only).
    Cache,
    /// A fixed result from the config (reads only).
    Static,
    /// The durable outbox (writes only, last).
    Queue,
    /// A tool of an upstream MCP server (`[mcp.servers.*]`).
    Mcp,
}

/// What a rung's answer may claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// The authoritative answer.
    Exact,
    /// Live, from a replica that may lag.
    Fresh,
    /// Captured earlier (a cache).
    Stale,
    /// Narrower than the primary's (a canned answer, a local index).
    Partial,
    /// Not executed yet: queued to run later.
    Deferred,
}

impl Fidelity {
    pub fn as_str(self) -> &'static str {
        match self {
            Fidelity::Exact => "exact",
            Fidelity::Fresh => "fresh",
            Fidelity::Stale => "stale",
            Fidelity::Partial => "partial",
            Fidelity::Deferred => "deferred",
        }
    }
}

/// What an http rung sends as its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BodyMode {
    /// The arguments as JSON.
    Args,
    /// No body.
    None,
}

/// One rung. Which fields apply depends on `kind`; the others are rejected by key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RungConfig {
    pub kind: RungKind,
    /// The name reported in provenance and metrics; unique within the tool.
    pub source: String,
    /// Defaults: the first http rung `exact`, later http rungs `fresh`, cache `stale`, static
    /// `partial`, queue `deferred`.
    #[serde(default)]
    pub fidelity: Option<Fidelity>,
    /// http: `GET`, `POST`, `PUT`, `PATCH` or `DELETE` (default `POST`).
    #[serde(default)]
    pub method: Option<String>,
    /// http: the URL, with `{name}` filled from the top-level argument `name` (URL-encoded).
    #[serde(default)]
    pub url: Option<String>,
    /// http: fixed headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// http: header name → environment variable holding its value (a secret; never logged).
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// http: the body (default `args`, or `none` for `GET`).
    #[serde(default)]
    pub body: Option<BodyMode>,
    /// http: the concurrency partition (default: one named after `source`).
    #[serde(default)]
    pub bulkhead: Option<String>,
    /// The rung's own budget (required for http; default 100 for cache, 1000 for queue).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// http: the largest response body read (default 1 MiB). A 2xx over it fails the rung (the
    /// ladder steps down); reading stops at the cap.
    #[serde(default)]
    pub max_response_bytes: Option<u64>,
    /// http and cache: the rung's own breaker (default 5 failures, 30 s cooldown).
    #[serde(default)]
    pub breaker: Option<BreakerConfig>,
    /// cache: the staleness budget; an older entry is declined (required).
    #[serde(default)]
    pub max_age_ms: Option<u64>,
    /// static: the result (required).
    #[serde(default)]
    pub result: Option<Value>,
    /// mcp: the server (`[mcp.servers.<name>]`).
    #[serde(default)]
    pub server: Option<String>,
    /// mcp: the tool's name on that server (default: this tool's name).
    #[serde(default)]
    pub tool: Option<String>,
}

/// A rung's breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerConfig {
    /// Failed calls in a row that open it.
    pub failures: u32,
    /// How long it stays open before one probe goes through.
    pub cooldown_ms: u64,
}

/// A gate rule: hold the write when `args.<field> <op> <value>`, or when the field is missing or
/// not comparable (a gate fails closed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateRule {
    /// A dot path into the arguments (`amount`, `refund.amount`, `items.0.price`).
    pub field: String,
    /// `>`, `>=`, `<`, `<=`, `==` or `!=` (the ordering ones need a numeric `value`).
    pub op: String,
    pub value: Value,
    /// Why a person must look, in words (shown to the model and the approver).
    pub reason: String,
}

/// Wording overrides for the `detail` sentence, one per situation. Placeholders: `{tool}`,
/// `{age}`, `{source}`, `{key}`, `{retry_after_ms}`, `{reason}`, and `{arg.NAME}` for the
/// call's top-level argument `NAME` (letters, digits, `_`, `-`), so a refusal can say what to do
/// next: `rejected_args = "No order {arg.order_id}. Ask the customer to check the number."`.
/// Any other placeholder is refused when the config loads, naming the key; argument names are
/// not known then, so any well-formed `{arg.NAME}` is accepted. A string argument is inserted
/// as it is, a number or a boolean as its JSON text; a missing argument (or `null`, an object,
/// an array, a blank string) renders as `(unknown)`. An inserted value is put on one line (line
/// breaks and other control characters do not survive) and cut to 200 characters: it comes
/// from the model and must not grow into a paragraph of steering text.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetailConfig {
    /// Served by a non-primary rung of fidelity `exact`.
    pub exact: Option<String>,
    /// Served by a `fresh` rung (a replica).
    pub fresh: Option<String>,
    /// Served by a `stale` rung (the cache).
    pub stale: Option<String>,
    /// Served by a `partial` rung (canned answer, local index).
    pub partial: Option<String>,
    /// A write queued in the outbox.
    pub queued: Option<String>,
    /// The read ladder ran out.
    pub refused: Option<String>,
    /// The write ladder ran out and nothing was sent that could have executed.
    pub refused_write: Option<String>,
    /// The write ladder ran out after a send whose outcome is unknown.
    pub unknown_outcome: Option<String>,
    /// A write queued after a send whose outcome is unknown (`idempotency` `key` or `lookup`).
    pub queued_unknown: Option<String>,
    /// A write whose outcome is unknown, held for a person (`idempotency = "none"`).
    pub held_for_review: Option<String>,
    /// The backend rejected the arguments: a 4xx that waiting cannot fix (not 401/403, 408, 409,
    /// 425 or 429), such as a read's 404 for an order that does not exist. The status is
    /// `refused`; `{reason}` is the backend's message.
    pub rejected_args: Option<String>,
    /// A full bulkhead.
    pub busy: Option<String>,
    /// A write held by a gate; `{reason}` is the rule's.
    pub pending_approval: Option<String>,
    /// A held write approved and queued.
    pub approved: Option<String>,
    /// A held write rejected by a person.
    pub rejected: Option<String>,
    /// A queued write the backend refused for good on replay.
    pub failed: Option<String>,
    /// A queued write executed by the replay worker.
    pub replayed: Option<String>,
}

/// The replay worker's settings (`[outbox]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// How long a claimed item is leased to one worker; an expired lease is claimed again.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// Full-jitter exponential backoff between replays of one item: the first wait's bound.
    #[serde(default = "default_backoff_base_ms")]
    pub backoff_base_ms: u64,
    /// The largest backoff bound.
    #[serde(default = "default_backoff_cap_ms")]
    pub backoff_cap_ms: u64,
    /// Items claimed per pass.
    #[serde(default = "default_batch")]
    pub batch: u32,
    /// How often the replay worker looks for due items.
    #[serde(default = "default_poll_ms")]
    pub poll_ms: u64,
    /// How long a finished write's key keeps its stored result (with its outbox item and hold);
    /// after that the same key starts afresh, as Stripe's keys expire. Queued, held and failed
    /// writes are kept however old.
    #[serde(default = "default_retain_ms")]
    pub keys_retain_ms: u64,
    /// How long a cached read result is kept (a `cache` rung serves it only within its own
    /// `max_age_ms` anyway).
    #[serde(default = "default_retain_ms")]
    pub cache_retain_ms: u64,
}

impl Default for OutboxConfig {
    fn default() -> Self {
        Self {
            lease_ms: default_lease_ms(),
            backoff_base_ms: default_backoff_base_ms(),
            backoff_cap_ms: default_backoff_cap_ms(),
            batch: default_batch(),
            poll_ms: default_poll_ms(),
            keys_retain_ms: default_retain_ms(),
            cache_retain_ms: default_retain_ms(),
        }
    }
}

fn default_lease_ms() -> u64 {
    30_000
}

fn default_backoff_base_ms() -> u64 {
    1_000
}

fn default_backoff_cap_ms() -> u64 {
    300_000
}

fn default_batch() -> u32 {
    32
}

fn default_poll_ms() -> u64 {
    500
}

/// Seven days.
fn default_retain_ms() -> u64 {
    7 * 24 * 3_600_000
}

pub use rein_core::problems::{ConfigError, ConfigProblem};

impl ToolsConfig {
    /// Validate everything but the environment (that every `headers_env` variable is set:
    /// [`ToolsConfig::compile`] looks them up). The config is rein.toml's `[bulkheads.*]`,
    /// `[tools.*]` and `[outbox]`, read by `rein-runtime`.
    pub fn validate(&self) -> Result<(), ConfigError> {
        compile(self, None).map(drop)
    }

    /// Validate everything, including that every `headers_env` variable is set in `env`, and
    /// compile the ladders a [`Dispatcher`](crate::Dispatcher) runs
    /// ([`Dispatcher::from_plan`](crate::Dispatcher::from_plan)).
    pub fn compile(&self, env: &dyn Fn(&str) -> Option<String>) -> Result<ToolsPlan, ConfigError> {
        compile(self, Some(env))
    }
}
