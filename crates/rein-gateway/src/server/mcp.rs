//! `/mcp`: rein as an MCP server (Streamable HTTP, by the official Rust SDK), serving the
//! upstream MCP servers' tools and rein's own through one list. The current protocol revision
//! (2026-07-28, stateless) and the previous one's initialize handshake are both answered; the
//! SDK negotiates. Every request carries a client key as on the other endpoints, and the same
//! context headers (`x-rein-deadline-ms`, `x-rein-run-id`, `x-rein-conversation-id`,
//! `traceparent`).
//!
//! Every `tools/call` goes through the tool's ladder with the run's stop conditions around it,
//! exactly as `POST /v1/tools/{tool}` does (`tools::settle`). The answer's `structuredContent`
//! is rein's envelope; its text says the same in words the model will honour, and `isError`
//! is set when nothing was returned (refused, busy, stopped). A write's idempotency key may
//! come in the call's `_meta` (`io.rein/idempotency-key`); without one, the same caller
//! calling the same tool with the same arguments again within `[mcp] reissue_window_ms` is the
//! re-issue MCP requires after a broken stream, and gets the first call's key. The call runs
//! to its end even if the caller's stream breaks, so the re-issue finds its result.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rein_core::CallContext;
use rein_tools::{ToolError, ToolStatus};
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock,
    ElicitRequest, ElicitRequestParams, Implementation, InputRequest, InputRequests,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};

use super::Gateway;
use super::intake::{self, IDEMPOTENCY_HEADER};
use super::record::ToolRecording;
use super::tools::{Settled, settle};

/// How long `tools/list` may take without a deadline header: the servers are asked at once.
const LIST_BUDGET: Duration = Duration::from_secs(10);

/// The service `/mcp` is: the SDK's Streamable HTTP transport around [`ReinMcp`].
pub(super) fn service(
    gateway: Arc<Gateway>,
) -> StreamableHttpService<ReinMcp, LocalSessionManager> {
    let mut config = StreamableHttpServerConfig::default();
    // Stateless: any replica answers any request, and no session outlives a restart.
    config.legacy_session_mode = false;
    config.json_response = true;
    // Callers are checked by their client key (the guard below); the Host check the SDK makes
    // for servers on a developer's laptop would refuse every deployed name.
    config = config.disable_allowed_hosts();
    // The guard has read the body within the gateway's own limit already.
    config.max_request_body_bytes = gateway.current().config.server.max_body_bytes;
    let factory = move || Ok(ReinMcp { gateway: gateway.clone() });
    StreamableHttpService::new(factory, Arc::new(LocalSessionManager::default()), config)
}

/// The edge of `/mcp`: the client key (401 with a JSON-RPC error body before the SDK reads
/// anything), then the whole body within `server.max_body_bytes` and `body_read_timeout_ms`
/// (413 / 408), as on every other endpoint.
pub(super) async fn guard(
    State(gateway): State<Arc<Gateway>>,
    request: Request,
    next: Next,
) -> Response {
    let snapshot = gateway.current();
    if !intake::client_allowed(&snapshot, request.headers()) {
        let message =
            "Incorrect API key provided. Send a rein client key as `Authorization: Bearer <key>`.";
        gateway.metrics.http_error("mcp", 401);
        let mut response = rpc_error(StatusCode::UNAUTHORIZED, -32001, message);
        response.headers_mut().insert(
            "www-authenticate",
            axum::http::HeaderValue::from_static("Bearer realm=\"rein\""),
        );
        return response;
    }
    let (parts, body) = request.into_parts();
    let server = &snapshot.config.server;
    match intake::read_request(body, &parts.headers, server).await {
        Ok(bytes) => next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Err(error) => {
            gateway.metrics.http_error("mcp", error.status().as_u16());
            rpc_error(error.status(), -32600, &error.message(server))
        }
    }
}

/// An HTTP error with a JSON-RPC error body, for what the edge turns away.
fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "error": {"code": code, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// rein's MCP server: one per request (stateless), sharing the gateway.
#[derive(Clone)]
pub(super) struct ReinMcp {
    gateway: Arc<Gateway>,
}

impl ServerHandler for ReinMcp {
    fn get_info(&self) -> ServerConfig {
        let capabilities = ServerCapabilities::builder().enable_tools().build();
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("rein", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Every tool result's structuredContent is rein's envelope: honour its status, degraded, fidelity, source, age and detail. A refused call must not be retried.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let headers = headers_of(&context);
        let ctx = match intake::call_context(&headers) {
            Ok(ctx) => ctx,
            Err(problem) => return Err(McpError::invalid_params(problem.message, None)),
        };
        let deadline = ctx.deadline().within(LIST_BUDGET);
        let runtime = self.gateway.current();
        let list = runtime.tools.mcp_tools(&deadline).await;
        let mut result = ListToolsResult::with_all_items(list.tools).with_ttl_ms(list.ttl_ms);
        result.cache_scope = Some(CacheScope::Private);
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let headers = headers_of(&context);
        let tool = request.name.to_string();
        let mut ctx = match intake::call_context(&headers) {
            Ok(ctx) => ctx,
            Err(problem) => {
                let message = format!("{}: {}", problem.header, problem.message);
                return Ok(result_of(rein_tools::envelope::not_made(&tool, &message)).into());
            }
        };
        let key = meta_key(&request).or_else(|| meta_key_of(&context.meta.0.0));
        match key {
            Some(Ok(key)) if ctx.idempotency_key.is_none() => ctx.idempotency_key = Some(key),
            Some(Err(message)) => {
                return Ok(result_of(rein_tools::envelope::not_made(&tool, &message)).into());
            }
            _ => {}
        }
        // The retry of an approval round names the held call's key; the store binds it to the
        // same tool and arguments, and only a person's decision moves it.
        if let Some(state) = request.request_state.as_deref() {
            match state.strip_prefix(HOLD_STATE_PREFIX).filter(|key| !key.is_empty()) {
                Some(key) if ctx.idempotency_key.as_deref().is_none_or(|k| k == key) => {
                    ctx.idempotency_key = Some(key.to_string());
                }
                _ => {
                    let message = "`requestState` is not one rein gave for this call: send the call again without it.";
                    return Ok(result_of(rein_tools::envelope::not_made(&tool, message)).into());
                }
            }
        }
        let approval_round = asks_by_url(&context);
        let caller = caller_of(&headers, &ctx);
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let gateway = self.gateway.clone();
        // The call runs to its end even when the caller's stream breaks: its re-issue then
        // finds the stored result instead of an abandoned one.
        let call = tool.clone();
        let task = tokio::spawn(async move { run(gateway, call, ctx, args, caller).await });
        let envelope = match task.await {
            Ok(Ok(envelope)) => envelope,
            Ok(Err(error)) => return Err(error),
            Err(_) => {
                return Err(McpError::internal_error("the tool call failed inside rein", None));
            }
        };
        let held = envelope.get("status") == Some(&json!("pending_approval"));
        if held && approval_round {
            let base = self.base_url(&headers);
            return Ok(CallToolResponse::InputRequired(approval_request(&envelope, &base)));
        }
        Ok(result_of(envelope).into())
    }
}

impl ReinMcp {
    /// Where the caller reached rein, for links back to it.
    fn base_url(&self, headers: &HeaderMap) -> String {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("localhost");
        let scheme = if self.gateway.serves_tls() { "https" } else { "http" };
        format!("{scheme}://{host}")
    }
}

/// What a held call's retry carries in `requestState`: this, then the call's idempotency key.
const HOLD_STATE_PREFIX: &str = "rein-hold:";

/// Whether the caller speaks the current revision's input rounds and opens URLs for the user
/// (URL elicitation): then a held write asks for the approval in the call itself.
fn asks_by_url(context: &RequestContext<RoleServer>) -> bool {
    let modern = context
        .protocol_version()
        .is_some_and(|version| version.as_str() >= ProtocolVersion::V_2026_07_28.as_str());
    let url = context
        .client_capabilities()
        .and_then(|capabilities| capabilities.elicitation)
        .is_some_and(|elicitation| elicitation.url.is_some());
    modern && url
}

/// A held write, as the current revision's input round: the user is sent to the hold (where a
/// person with rein's admin key decides), and the retry carries the call's key. Accepting the
/// request approves nothing: only the person's decision does.
fn approval_request(envelope: &Value, base: &str) -> InputRequiredResult {
    let hold = envelope.get("hold_id").and_then(Value::as_i64).unwrap_or_default();
    let key = envelope.get("idempotency_key").and_then(Value::as_str).unwrap_or_default();
    let detail = envelope.get("detail").and_then(Value::as_str).unwrap_or_default();
    let message = format!(
        "{detail} A person must approve it at the link (hold {hold}); it runs once after they do. Come back here once it is decided."
    );
    let params = ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message,
        url: format!("{base}/admin/approvals/{hold}"),
        elicitation_id: format!("rein-hold-{hold}"),
    };
    let mut requests = InputRequests::new();
    requests.insert("approval".to_string(), InputRequest::Elicitation(ElicitRequest::new(params)));
    InputRequiredResult::new(Some(requests), Some(format!("{HOLD_STATE_PREFIX}{key}")))
}

/// One call through [`settle`]: the envelope the caller is answered with.
async fn run(
    gateway: Arc<Gateway>,
    tool: String,
    ctx: CallContext,
    args: Value,
    caller: String,
) -> Result<Value, McpError> {
    let runtime = gateway.current();
    let request_id = intake::new_id("mcp_");
    let recording = ToolRecording::start(&ctx, &tool);
    let settled =
        settle(&gateway, &runtime, &tool, &ctx, args, recording, &request_id, Some(&caller));
    match settled.await {
        Ok(settled) => Ok(match settled.kind {
            Settled::Stopped { status } => {
                let detail = &runtime.config.runs.stopped_detail;
                rein_tools::envelope::stopped(&tool, &status, detail)
            }
            Settled::Done { outcome, .. } => outcome.envelope,
        }),
        Err(ToolError::UnknownTool(name)) => {
            Err(McpError::invalid_params(format!("Unknown tool: {name}"), None))
        }
        Err(ToolError::KeyInFlight { key, retry_after_ms }) => {
            Ok(rein_tools::envelope::in_flight(&tool, &key, retry_after_ms))
        }
        Err(ToolError::Store(error)) => {
            tracing::error!(request_id, tool, "tool store failed: {error}");
            Ok(rein_tools::envelope::not_made(
                &tool,
                "rein's tool store is unavailable; nothing was sent. Do not tell the user it is done; try again later.",
            ))
        }
        Err(other) => Ok(rein_tools::envelope::not_made(&tool, &other.to_string())),
    }
}

/// The HTTP request's headers, which the SDK hands the handler.
fn headers_of(context: &RequestContext<RoleServer>) -> HeaderMap {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .map(|parts| parts.headers.clone())
        .unwrap_or_default()
}

/// The caller, for recognising a re-issue: their client key, their legacy session, their
/// conversation (rein keeps only a digest of it).
fn caller_of(headers: &HeaderMap, ctx: &CallContext) -> String {
    let header = |name: &str| {
        headers.get(name).and_then(|value| value.to_str().ok()).unwrap_or("").to_string()
    };
    format!(
        "{}\u{1f}{}\u{1f}{}\u{1f}{}",
        header("authorization"),
        header("x-api-key"),
        header("mcp-session-id"),
        ctx.conversation_id.as_deref().unwrap_or("")
    )
}

/// The key in the call's `_meta`, if any: `Err` when it is not a string.
fn meta_key(request: &CallToolRequestParams) -> Option<Result<String, String>> {
    let meta = request.meta.as_ref()?;
    meta_key_of(&meta.0.0)
}

fn meta_key_of(meta: &serde_json::Map<String, Value>) -> Option<Result<String, String>> {
    let value = meta.get(rein_tools::mcp::IDEMPOTENCY_META_KEY)?;
    Some(match value {
        Value::String(key) => Ok(key.clone()),
        _ => Err(format!(
            "`_meta.{}` must be a string (the write's idempotency key, as in the `{IDEMPOTENCY_HEADER}` header)",
            rein_tools::mcp::IDEMPOTENCY_META_KEY
        )),
    })
}

/// An envelope as the MCP result the model reads.
fn result_of(envelope: Value) -> CallToolResult {
    let status = envelope.get("status").and_then(Value::as_str).and_then(ToolStatus::parse);
    let nothing_returned = matches!(status, Some(ToolStatus::Refused | ToolStatus::Busy) | None);
    let mut content = Vec::new();
    if let Some(detail) = envelope.get("detail").and_then(Value::as_str) {
        content.push(ContentBlock::text(detail.to_string()));
    }
    match envelope.get("result") {
        Some(Value::Array(blocks)) if blocks.iter().all(is_content_block) => {
            content.extend(blocks.iter().filter_map(|b| serde_json::from_value(b.clone()).ok()));
        }
        Some(Value::String(text)) => content.push(ContentBlock::text(text.clone())),
        Some(result) => content.push(ContentBlock::text(result.to_string())),
        None => {}
    }
    if content.is_empty() {
        content.push(ContentBlock::text(envelope.to_string()));
    }
    let mut result = if nothing_returned || envelope.get("status") == Some(&json!("stopped")) {
        CallToolResult::error(content)
    } else {
        CallToolResult::success(content)
    };
    result.structured_content = Some(envelope);
    result
}

/// Whether a JSON value looks like an MCP content block (a server's content returned as is).
fn is_content_block(value: &Value) -> bool {
    value.get("type").and_then(Value::as_str).is_some()
}
