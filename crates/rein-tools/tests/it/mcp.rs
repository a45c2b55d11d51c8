//! Upstream MCP servers: the `[mcp]` config's rules (each named by its key), and the dispatcher
//! over a real MCP server (the official Rust SDK's, over Streamable HTTP on 127.0.0.1) that the
//! tests stop: its listed tools get ladders by their annotations, a read steps down to the
//! cache with its provenance, a write's key reaches the server in `_meta`, and a caller's
//! re-issue of a write is answered under the first call's key without running again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rein_core::CallContext;
use rein_tools::config::ToolKind;
use rein_tools::{ToolError, ToolStatus};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, ServerHandler};
use serde_json::{Value, json};

use crate::support::{Harness, assert_provenance, parse_tools, strip_provenance};

/// What the upstream saw.
#[derive(Debug, Default)]
struct Ledger {
    /// Executions of `pay`, with the key each carried.
    payments: Mutex<Vec<Option<String>>>,
    lookups: AtomicUsize,
}

#[derive(Clone)]
struct Upstream {
    ledger: Arc<Ledger>,
}

fn schema(field: &str) -> Arc<JsonObject> {
    let value =
        json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]});
    Arc::new(value.as_object().cloned().unwrap())
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = vec![
            Tool::new("lookup", "Look an order up.", schema("order_id"))
                .with_annotations(ToolAnnotations::new().read_only(true)),
            Tool::new("pay", "Pay an invoice.", schema("invoice_id"))
                .with_annotations(ToolAnnotations::new().read_only(false).destructive(true)),
            Tool::new("note", "Write a note (no annotations: MCP's defaults).", schema("text")),
        ];
        Ok(ListToolsResult::with_all_items(tools).with_ttl_ms(30_000))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let key = request
            .meta
            .as_ref()
            .and_then(|meta| meta.0.0.get(rein_tools::mcp::IDEMPOTENCY_META_KEY).cloned())
            .or_else(|| context.meta.0.0.get(rein_tools::mcp::IDEMPOTENCY_META_KEY).cloned())
            .and_then(|key| key.as_str().map(str::to_string));
        let result = match request.name.as_ref() {
            "lookup" => {
                self.ledger.lookups.fetch_add(1, Ordering::SeqCst);
                CallToolResult::structured(
                    json!({"order_id": args["order_id"], "status": "shipped"}),
                )
            }
            "pay" | "note" => {
                let mut payments = self.ledger.payments.lock().unwrap();
                payments.push(key.clone());
                CallToolResult::structured(json!({"paid": args, "execution": payments.len()}))
            }
            other => CallToolResult::error(vec![ContentBlock::text(format!("no tool {other}"))]),
        };
        Ok(result.into())
    }
}

/// An MCP server on 127.0.0.1, and the handle that stops it.
struct Running {
    url: String,
    ledger: Arc<Ledger>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stop accepting and close every connection (kept-alive ones too): a dead server.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

async fn start_upstream() -> Running {
    serve_upstream("127.0.0.1:0").await
}

async fn serve_upstream(addr: &str) -> Running {
    let ledger = Arc::new(Ledger::default());
    let upstream = Upstream { ledger: ledger.clone() };
    let mut config = StreamableHttpServerConfig::default();
    config.legacy_session_mode = false;
    config.json_response = true;
    let service = StreamableHttpService::new(
        move || Ok(upstream.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        axum::serve(listener, router).with_graceful_shutdown(shutdown).await.unwrap();
    });
    Running { url: format!("http://{addr}/mcp"), ledger, stop, task }
}

fn config(url: &str, extra: &str) -> String {
    format!(
        r#"
[mcp.servers.up]
url = "{url}"
timeout_ms = 2000
cache_max_age_ms = 3600000

[tools.pay_invoice]
kind = "write"
idempotency = "key"
[[tools.pay_invoice.rungs]]
kind = "mcp"
source = "up"
server = "up"
tool = "pay"
timeout_ms = 2000
{extra}
"#
    )
}

#[tokio::test]
async fn listed_tools_are_the_servers_under_its_prefix_and_the_configured_ladders() {
    let upstream = start_upstream().await;
    let harness = Harness::new(&config(&upstream.url, ""));
    let list = harness.dispatcher.mcp_tools(&rein_core::Deadline::after(secs(5))).await;
    let names: Vec<&str> = list.tools.iter().map(|tool| tool.name.as_ref()).collect();
    // `pay` is taken over by the `pay_invoice` ladder: listed once, under its name.
    assert_eq!(names, ["pay_invoice", "up__lookup", "up__note"]);
    assert!(list.ttl_ms > 0 && list.ttl_ms <= 30_000, "{}", list.ttl_ms);
    let pay = &list.tools[0];
    assert_eq!(pay.description.as_deref(), Some("Pay an invoice."));
    assert_eq!(pay.annotations.as_ref().and_then(|a| a.read_only_hint), Some(false));
    // Every listed tool answers rein's envelope.
    assert!(list.tools.iter().all(|tool| tool.output_schema.is_some()));
    // The taken-over tool is not callable under the server's prefix.
    let error = harness.call_with("up__pay", json!({"invoice_id": "I1"}), CallContext::new());
    assert!(matches!(error.await, Err(ToolError::UnknownTool(_))));
    let error = harness.call_with("up__nope", json!({}), CallContext::new()).await;
    assert!(matches!(error, Err(ToolError::UnknownTool(_))), "{error:?}");

    // The server gone: within the list's ttl rein does not ask; past it, the last list is
    // served, marked with its age.
    upstream.stop().await;
    let list = harness.dispatcher.mcp_tools(&rein_core::Deadline::after(secs(5))).await;
    let lookup = list.tools.iter().find(|tool| tool.name == "up__lookup").unwrap();
    assert!(rein_tools::mcp::listing_meta(lookup).is_none(), "a fresh list is not marked");
    tokio::time::pause();
    tokio::time::advance(secs(31)).await;
    let list = harness.dispatcher.mcp_tools(&rein_core::Deadline::after(secs(5))).await;
    let lookup = list.tools.iter().find(|tool| tool.name == "up__lookup").unwrap();
    let marked = rein_tools::mcp::listing_meta(lookup)
        .unwrap_or_else(|| panic!("a kept list is marked: {lookup:?}"));
    assert_eq!(marked["server"], "up");
    assert_eq!(marked["from"], "cache");
}

#[tokio::test]
async fn a_listed_read_steps_down_to_the_cache_with_its_provenance() {
    let upstream = start_upstream().await;
    let harness = Harness::new(&config(&upstream.url, ""));
    let args = json!({"order_id": "A1"});
    let live = harness.call("up__lookup", args.clone()).await;
    assert_eq!(live.status, ToolStatus::Ok);
    assert_eq!(live.envelope["degraded"], false);
    assert_eq!(live.envelope["result"]["status"], "shipped");
    assert_eq!(upstream.ledger.lookups.load(Ordering::SeqCst), 1);
    // The ladder made for the listed tool is an operator's to see, breakers and all.
    let breakers = harness.dispatcher.breakers();
    let sources: Vec<(&str, &str)> = breakers
        .iter()
        .filter(|b| b.tool == "up__lookup")
        .map(|b| (b.tool.as_str(), b.source.as_str()))
        .collect();
    assert_eq!(sources, [("up__lookup", "up"), ("up__lookup", "cache")]);
    assert!(harness.dispatcher.tools().contains(&("up__lookup".to_string(), ToolKind::Read)));

    upstream.stop().await;
    let cached = harness.call("up__lookup", args).await;
    assert_eq!(cached.served_by.as_deref(), Some("cache"), "{}", cached.envelope);
    assert_provenance(&cached.envelope, 60).unwrap();
    assert_eq!(cached.envelope["result"]["order_id"], "A1");
    // Negative: without its provenance the same answer fails the same check.
    assert!(assert_provenance(&strip_provenance(&cached.envelope), 60).is_err());

    // Arguments never answered live: nothing to serve, and the refusal says not to retry.
    let refused = harness.call("up__lookup", json!({"order_id": "B2"})).await;
    assert_eq!(refused.status, ToolStatus::Refused);
    let detail = refused.envelope["detail"].as_str().unwrap();
    assert!(detail.contains("do not retry"), "{detail}");
}

#[tokio::test]
async fn an_unannotated_tool_is_a_write_and_never_reruns_on_a_guess() {
    let upstream = start_upstream().await;
    let harness = Harness::new(&config(&upstream.url, ""));
    let first = harness.call("up__note", json!({"text": "hi"})).await;
    assert_eq!(first.status, ToolStatus::Ok);
    // A write carries a key (minted), which a read never does.
    let key = first.envelope["idempotency_key"].as_str().expect("a write's key").to_string();
    assert_eq!(upstream.ledger.payments.lock().unwrap().as_slice(), [Some(key)]);
}

#[tokio::test]
async fn a_reissued_write_gets_the_first_calls_key_and_runs_once() {
    let upstream = start_upstream().await;
    let harness = Harness::new(&config(&upstream.url, ""));
    let args = json!({"invoice_id": "I-7"});
    let ctx = CallContext::new();
    let call = |caller: &'static str| {
        let (dispatcher, args, ctx) = (harness.dispatcher.clone(), args.clone(), ctx.clone());
        async move { dispatcher.call_as(&ctx, "pay_invoice", args, Some(caller)).await.unwrap() }
    };
    let first = call("client-a").await;
    assert_eq!(first.status, ToolStatus::Ok);
    assert!(!first.replayed);
    let key = first.envelope["idempotency_key"].as_str().unwrap().to_string();
    // The key reached the server in `_meta`, so a server that honours it deduplicates.
    assert_eq!(upstream.ledger.payments.lock().unwrap().as_slice(), [Some(key.clone())]);

    // The same caller sends the same call again (its stream broke): the stored result.
    let again = call("client-a").await;
    assert!(again.replayed, "{}", again.envelope);
    assert_eq!(again.envelope["idempotency_key"], key.as_str());
    assert_eq!(upstream.ledger.payments.lock().unwrap().len(), 1);

    // Another caller's identical call is its own.
    let other = call("client-b").await;
    assert!(!other.replayed);
    assert_ne!(other.envelope["idempotency_key"], key.as_str());
    assert_eq!(upstream.ledger.payments.lock().unwrap().len(), 2);

    // Past the window, the same caller's call is a new one.
    harness.clock.advance_ms(600_001);
    let later = call("client-a").await;
    assert!(!later.replayed);
    assert_eq!(upstream.ledger.payments.lock().unwrap().len(), 3);
}

#[tokio::test]
async fn a_write_with_its_server_down_is_queued_and_replayed_once_with_its_key() {
    let upstream = start_upstream().await;
    let url = upstream.url.clone();
    upstream.stop().await;
    let queue = "[[tools.pay_invoice.rungs]]\nkind = \"queue\"\nsource = \"outbox\"\n";
    let harness = Harness::new(&config(&url, queue));
    let queued = harness.call("pay_invoice", json!({"invoice_id": "I-9"})).await;
    assert_eq!(queued.status, ToolStatus::Queued, "{}", queued.envelope);
    let key = queued.envelope["idempotency_key"].as_str().unwrap().to_string();

    // The server back on the same address: one replay sends it, with the same key.
    let addr = url.trim_start_matches("http://").trim_end_matches("/mcp").to_string();
    let back = serve_upstream(&addr).await;
    harness.clock.advance_ms(60_000);
    let report = harness.dispatcher.replay_due("test", 10).await;
    assert_eq!(report.done, 1, "{report:?}");
    let report = harness.dispatcher.replay_due("test", 10).await;
    assert_eq!(report.done, 0, "{report:?}");
    assert_eq!(back.ledger.payments.lock().unwrap().as_slice(), [Some(key)]);
}

fn secs(n: u64) -> std::time::Duration {
    std::time::Duration::from_secs(n)
}

#[test]
fn mcp_config_errors_name_the_key() {
    let server = "[mcp.servers.up]\nurl = \"http://127.0.0.1:1/mcp\"\n";
    let cases: &[(&str, String, &str)] = &[
        (
            "a server is reached one way",
            "[mcp.servers.up]\nurl = \"http://x/mcp\"\ncommand = \"srv\"\n".into(),
            "mcp.servers.up.command",
        ),
        ("a server needs a way at all", "[mcp.servers.up]\ntimeout_ms = 5\n".into(), "mcp.servers.up"),
        (
            "only http(s) URLs",
            "[mcp.servers.up]\nurl = \"file:///etc/passwd\"\n".into(),
            "mcp.servers.up.url",
        ),
        (
            "prefixes are distinct",
            format!("{server}[mcp.servers.down]\nurl = \"http://x/mcp\"\nprefix = \"up\"\n"),
            // Reported at the later of the two in name order, naming the other.
            "mcp.servers.up",
        ),
        (
            "a prefix cannot run into the separator",
            "[mcp.servers.up]\nurl = \"http://x/mcp\"\nprefix = \"up_\"\n".into(),
            "mcp.servers.up.prefix",
        ),
        (
            "a configured name inside a server's prefix",
            format!("{server}[tools.up__x]\nkind = \"read\"\n[[tools.up__x.rungs]]\nkind = \"static\"\nsource = \"s\"\nresult = {{}}\n"),
            "tools.up__x",
        ),
        (
            "an mcp rung names a declared server",
            "[tools.t]\nkind = \"read\"\n[[tools.t.rungs]]\nkind = \"mcp\"\nsource = \"s\"\nserver = \"nowhere\"\n".into(),
            "tools.t.rungs[0].server",
        ),
        (
            "an mcp rung has no URL",
            format!("{server}[tools.t]\nkind = \"read\"\n[[tools.t.rungs]]\nkind = \"mcp\"\nsource = \"s\"\nserver = \"up\"\nurl = \"http://x\"\n"),
            "tools.t.rungs[0].url",
        ),
        (
            "a queue rung may follow an mcp primary, a cache rung not a write",
            format!("{server}[tools.w]\nkind = \"write\"\n[[tools.w.rungs]]\nkind = \"mcp\"\nsource = \"s\"\nserver = \"up\"\n[[tools.w.rungs]]\nkind = \"cache\"\nsource = \"c\"\nmax_age_ms = 5\n"),
            "tools.w.rungs[1].kind",
        ),
    ];
    for (why, text, key) in cases {
        let error = parse_tools(text).and_then(|config| config.validate()).unwrap_err();
        assert!(error.names(key), "{why}: expected `{key}`, got {error}");
    }
    // A queue after an mcp primary is fine.
    let fine = format!(
        "{server}[tools.w]\nkind = \"write\"\n[[tools.w.rungs]]\nkind = \"mcp\"\nsource = \"s\"\nserver = \"up\"\n[[tools.w.rungs]]\nkind = \"queue\"\nsource = \"q\"\n"
    );
    parse_tools(&fine).unwrap().validate().unwrap();
}

#[test]
fn an_unset_server_secret_is_named_without_its_value() {
    let text = "[mcp.servers.up]\nurl = \"http://127.0.0.1:1/mcp\"\nheaders_env = { authorization = \"UP_TOKEN\" }\n";
    let config = parse_tools(text).unwrap();
    let error = config.compile(&|_| None).unwrap_err();
    assert!(error.names("mcp.servers.up.headers_env.authorization"), "{error}");
    let plan = config.compile(&|_| Some("Bearer very-secret".into())).unwrap();
    assert!(!format!("{plan:?}").contains("very-secret"), "a secret leaked into Debug");
}

#[tokio::test]
async fn a_replica_server_answers_fresh_when_the_primary_is_down() {
    let primary = start_upstream().await;
    let replica = start_upstream().await;
    let text = format!(
        r#"
[mcp.servers.up]
url = "{}"
[mcp.servers.replica]
url = "{}"

[tools.lookup_order]
kind = "read"
[[tools.lookup_order.rungs]]
kind = "mcp"
source = "up"
server = "up"
tool = "lookup"
timeout_ms = 2000
[[tools.lookup_order.rungs]]
kind = "mcp"
source = "replica"
server = "replica"
tool = "lookup"
timeout_ms = 2000
"#,
        primary.url, replica.url
    );
    let harness = Harness::new(&text);
    let args = json!({"order_id": "A9"});
    let live = harness.call("lookup_order", args.clone()).await;
    assert_eq!(live.served_by.as_deref(), Some("up"));
    // The tool of both servers is the configured ladder's, listed under its name only.
    let list = harness.dispatcher.mcp_tools(&rein_core::Deadline::after(secs(5))).await;
    let names: Vec<&str> = list.tools.iter().map(|tool| tool.name.as_ref()).collect();
    assert_eq!(
        names,
        ["lookup_order", "replica__note", "replica__pay", "up__note", "up__pay"],
        "{names:?}"
    );
    primary.stop().await;
    let fresh = harness.call("lookup_order", args).await;
    assert_eq!(fresh.served_by.as_deref(), Some("replica"), "{}", fresh.envelope);
    assert_eq!(fresh.envelope["fidelity"], "fresh");
    assert_eq!(fresh.envelope["degraded"], true);
    assert_eq!(replica.ledger.lookups.load(Ordering::SeqCst), 1);
    let error = harness.call_with("replica__lookup", json!({}), CallContext::new()).await;
    assert!(matches!(error, Err(ToolError::UnknownTool(_))), "{error:?}");
}
