//! The test harness: a dispatcher built from a TOML ladder, over the SQLite tool store wrapped
//! to count cache reads (and to fail them on demand), with a wall clock the test moves, an
//! observer that records every callback, and the provenance assertion both the positive and
//! the negative provenance tests use.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rein_core::{CallContext, FixedJitter};
use rein_store::handoffs::{
    Handoff, HandoffDelivery, HandoffFilter, NewHandoff, ReviewDecision, ReviewStats,
};
use rein_store::runs::{ModelCall, ModelCallDone, ModelCallStep};
use rein_store::tools::{
    CachedResult, Decision, Hold, HoldState, KeyBegin, NewHold, NewOutboxItem, OutboxItem,
    OutboxState, OutboxStats, Pruned, ToolStore,
};
use rein_store::{SqliteToolStore, Store, StoreError};
use rein_tools::{
    Dispatcher, PROVENANCE_FIELDS, ReplayResult, SystemClock, ToolError, ToolObserver, ToolOutcome,
    ToolStatus, ToolsConfig, WallClock,
};
use serde_json::Value;

/// The SQLite tool store, counting cache reads and failing them on demand.
#[derive(Debug)]
pub(crate) struct TestStore {
    inner: SqliteToolStore,
    pub cache_gets: AtomicUsize,
    pub fail_cache: AtomicBool,
}

impl TestStore {
    pub(crate) fn new() -> Self {
        let store = Store::open_in_memory().unwrap();
        Self {
            inner: SqliteToolStore::new(Arc::new(store)),
            cache_gets: AtomicUsize::new(0),
            fail_cache: AtomicBool::new(false),
        }
    }

    pub(crate) fn cache_gets(&self) -> usize {
        self.cache_gets.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl ToolStore for TestStore {
    async fn key_begin(
        &self,
        key: &str,
        tool: &str,
        args_hash: &str,
        now_unix_ms: i64,
        lease_ms: i64,
    ) -> Result<KeyBegin, StoreError> {
        self.inner.key_begin(key, tool, args_hash, now_unix_ms, lease_ms).await
    }

    async fn key_finish(
        &self,
        key: &str,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        self.inner.key_finish(key, result, now_unix_ms).await
    }

    async fn key_recent(
        &self,
        tool: &str,
        args_hash: &str,
        prefix: &str,
        since_unix_ms: i64,
    ) -> Result<Option<String>, StoreError> {
        self.inner.key_recent(tool, args_hash, prefix, since_unix_ms).await
    }

    async fn key_abandon(&self, key: &str) -> Result<(), StoreError> {
        self.inner.key_abandon(key).await
    }

    async fn kill_record(&self, flip: &rein_core::KillFlip) -> Result<i64, StoreError> {
        self.inner.kill_record(flip).await
    }

    async fn kill_flips_after(
        &self,
        after: i64,
    ) -> Result<Vec<(i64, rein_core::KillFlip)>, StoreError> {
        self.inner.kill_flips_after(after).await
    }

    async fn route_to_record(&self, flip: &rein_core::RouteToFlip) -> Result<i64, StoreError> {
        self.inner.route_to_record(flip).await
    }

    async fn route_to_flips_after(
        &self,
        after: i64,
    ) -> Result<Vec<(i64, rein_core::RouteToFlip)>, StoreError> {
        self.inner.route_to_flips_after(after).await
    }

    async fn run_record(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        event: rein_store::runs::RunEvent<'_>,
        now_unix_ms: i64,
        idle_ms: i64,
    ) -> Result<rein_store::runs::RunCounts, StoreError> {
        self.inner.run_record(run_id, conversation_id, event, now_unix_ms, idle_ms).await
    }

    async fn run_stop(
        &self,
        run_id: &str,
        status: &str,
        now_unix_ms: i64,
    ) -> Result<String, StoreError> {
        self.inner.run_stop(run_id, status, now_unix_ms).await
    }

    async fn runs_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError> {
        self.inner.runs_prune(before_unix_ms).await
    }

    async fn run_evidence_add(
        &self,
        run_id: &str,
        items: &[serde_json::Value],
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        self.inner.run_evidence_add(run_id, items, now_unix_ms).await
    }

    async fn run_evidence(
        &self,
        run_id: &str,
        since_unix_ms: i64,
    ) -> Result<Vec<serde_json::Value>, StoreError> {
        self.inner.run_evidence(run_id, since_unix_ms).await
    }

    async fn outbox_enqueue(
        &self,
        item: &NewOutboxItem,
        queued_result: &Value,
        now_unix_ms: i64,
    ) -> Result<OutboxItem, StoreError> {
        self.inner.outbox_enqueue(item, queued_result, now_unix_ms).await
    }

    async fn outbox_claim(
        &self,
        owner: &str,
        now_unix_ms: i64,
        lease_ms: i64,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        self.inner.outbox_claim(owner, now_unix_ms, lease_ms, limit).await
    }

    async fn outbox_complete(
        &self,
        id: i64,
        result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner.outbox_complete(id, result, now_unix_ms).await
    }

    async fn outbox_retry_later(
        &self,
        id: i64,
        error: &str,
        next_attempt_unix_ms: i64,
        outcome_unknown: bool,
    ) -> Result<bool, StoreError> {
        self.inner.outbox_retry_later(id, error, next_attempt_unix_ms, outcome_unknown).await
    }

    async fn outbox_review(
        &self,
        id: i64,
        error: &str,
        review_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner.outbox_review(id, error, review_result, now_unix_ms).await
    }

    async fn outbox_fail(
        &self,
        id: i64,
        error: &str,
        failed_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner.outbox_fail(id, error, failed_result, now_unix_ms).await
    }

    async fn outbox_list(
        &self,
        state: Option<OutboxState>,
        limit: i64,
    ) -> Result<Vec<OutboxItem>, StoreError> {
        self.inner.outbox_list(state, limit).await
    }

    async fn outbox_get(&self, id: i64) -> Result<Option<OutboxItem>, StoreError> {
        self.inner.outbox_get(id).await
    }

    async fn outbox_replay_now(&self, id: i64, now_unix_ms: i64) -> Result<bool, StoreError> {
        self.inner.outbox_replay_now(id, now_unix_ms).await
    }

    async fn outbox_drop(
        &self,
        id: i64,
        dropped_result: &Value,
        now_unix_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner.outbox_drop(id, dropped_result, now_unix_ms).await
    }

    async fn outbox_stats(&self) -> Result<OutboxStats, StoreError> {
        self.inner.outbox_stats().await
    }

    async fn cache_put(
        &self,
        tool: &str,
        args_hash: &str,
        result: &Value,
        captured_unix_ms: i64,
    ) -> Result<(), StoreError> {
        self.inner.cache_put(tool, args_hash, result, captured_unix_ms).await
    }

    async fn prune(&self, keys_before: i64, cache_before: i64) -> Result<Pruned, StoreError> {
        self.inner.prune(keys_before, cache_before).await
    }

    async fn cache_get(
        &self,
        tool: &str,
        args_hash: &str,
    ) -> Result<Option<CachedResult>, StoreError> {
        self.cache_gets.fetch_add(1, Ordering::SeqCst);
        if self.fail_cache.load(Ordering::SeqCst) {
            return Err(StoreError::Corrupt("the cache is down (test switch)".into()));
        }
        self.inner.cache_get(tool, args_hash).await
    }

    async fn hold_create(
        &self,
        hold: &NewHold,
        held_result: &Value,
        now_unix_ms: i64,
    ) -> Result<Hold, StoreError> {
        self.inner.hold_create(hold, held_result, now_unix_ms).await
    }

    async fn hold_list(
        &self,
        state: Option<HoldState>,
        limit: i64,
    ) -> Result<Vec<Hold>, StoreError> {
        self.inner.hold_list(state, limit).await
    }

    async fn hold_get(&self, id: i64) -> Result<Option<Hold>, StoreError> {
        self.inner.hold_get(id).await
    }

    async fn hold_decide(
        &self,
        id: i64,
        decision: &Decision,
        by: &str,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Hold>, StoreError> {
        self.inner.hold_decide(id, decision, by, note, now_unix_ms).await
    }

    async fn run_tool_log_add(
        &self,
        run_id: &str,
        call: &rein_store::runs::RunToolCall,
    ) -> Result<(), StoreError> {
        self.inner.run_tool_log_add(run_id, call).await
    }

    async fn run_tool_log(
        &self,
        run_id: &str,
    ) -> Result<Vec<rein_store::runs::RunToolCall>, StoreError> {
        self.inner.run_tool_log(run_id).await
    }

    async fn run_model_call(&self, call: &ModelCall<'_>) -> Result<ModelCallStep, StoreError> {
        self.inner.run_model_call(call).await
    }

    async fn run_model_call_done(&self, done: &ModelCallDone<'_>) -> Result<(), StoreError> {
        self.inner.run_model_call_done(done).await
    }

    async fn run_note(
        &self,
        run_id: &str,
        conversation_id: Option<&str>,
        note: &rein_store::runs::RunNote,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        self.inner.run_note(run_id, conversation_id, note, now_unix_ms).await
    }

    async fn run_get(&self, run_id: &str) -> Result<Option<rein_store::runs::RunInfo>, StoreError> {
        self.inner.run_get(run_id).await
    }

    async fn spend_add(
        &self,
        conversation_id: &str,
        micro_usd: i64,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError> {
        self.inner.spend_add(conversation_id, micro_usd, now_unix_ms).await
    }

    async fn spend_of(&self, conversation_id: &str) -> Result<i64, StoreError> {
        self.inner.spend_of(conversation_id).await
    }

    async fn question_seen(
        &self,
        conversation_id: &str,
        run_id: &str,
        question_hash: &str,
        now_unix_ms: i64,
    ) -> Result<i64, StoreError> {
        self.inner.question_seen(conversation_id, run_id, question_hash, now_unix_ms).await
    }

    async fn conversations_prune(&self, before_unix_ms: i64) -> Result<u64, StoreError> {
        self.inner.conversations_prune(before_unix_ms).await
    }

    async fn calls_record(
        &self,
        calls: Vec<rein_store::calls::RecordedCall>,
        tools: Vec<rein_store::calls::RecordedTool>,
    ) -> Result<(), StoreError> {
        self.inner.calls_record(calls, tools).await
    }

    async fn calls_since(
        &self,
        since_unix_ms: i64,
        route: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(i64, rein_core::sli::CallRecord)>, StoreError> {
        self.inner.calls_since(since_unix_ms, route, limit).await
    }

    async fn traces_list(
        &self,
        filter: &rein_store::calls::TraceFilter,
        limit: i64,
    ) -> Result<Vec<rein_store::calls::TraceSummary>, StoreError> {
        self.inner.traces_list(filter, limit).await
    }

    async fn trace_get(&self, id: &str) -> Result<Vec<rein_core::trace::Trace>, StoreError> {
        self.inner.trace_get(id).await
    }

    async fn verdict_record(
        &self,
        verdict: &rein_store::calls::Verdict,
    ) -> Result<bool, StoreError> {
        self.inner.verdict_record(verdict).await
    }

    async fn verdicts_list(
        &self,
        filter: &rein_store::calls::VerdictFilter,
        limit: i64,
    ) -> Result<Vec<rein_store::calls::Verdict>, StoreError> {
        self.inner.verdicts_list(filter, limit).await
    }

    async fn calls_prune(
        &self,
        retention: &rein_store::calls::CallsRetention,
    ) -> Result<rein_store::calls::CallsPruned, StoreError> {
        self.inner.calls_prune(retention).await
    }

    async fn handoff_open(
        &self,
        new: &NewHandoff,
        now_unix_ms: i64,
    ) -> Result<(Handoff, bool), StoreError> {
        self.inner.handoff_open(new, now_unix_ms).await
    }

    async fn handoff_delivery(
        &self,
        id: i64,
        delivery: HandoffDelivery,
        ticket: Option<&Value>,
        detail: Option<&str>,
        now_unix_ms: i64,
    ) -> Result<(), StoreError> {
        self.inner.handoff_delivery(id, delivery, ticket, detail, now_unix_ms).await
    }

    async fn handoff_list(
        &self,
        filter: &HandoffFilter,
        limit: i64,
    ) -> Result<Vec<Handoff>, StoreError> {
        self.inner.handoff_list(filter, limit).await
    }

    async fn handoff_get(&self, id: i64) -> Result<Option<Handoff>, StoreError> {
        self.inner.handoff_get(id).await
    }

    async fn handoff_find(&self, conversation_id: &str) -> Result<Option<Handoff>, StoreError> {
        self.inner.handoff_find(conversation_id).await
    }

    async fn handoff_decide(
        &self,
        id: i64,
        decision: ReviewDecision,
        by: &str,
        edited_draft: Option<&str>,
        note: &str,
        now_unix_ms: i64,
    ) -> Result<Option<Handoff>, StoreError> {
        self.inner.handoff_decide(id, decision, by, edited_draft, note, now_unix_ms).await
    }

    async fn handoff_review_stats(
        &self,
        since_unix_ms: i64,
    ) -> Result<Vec<ReviewStats>, StoreError> {
        self.inner.handoff_review_stats(since_unix_ms).await
    }
}

/// The system clock plus an offset the test moves forward.
#[derive(Debug, Default)]
pub(crate) struct ManualClock {
    offset_ms: AtomicI64,
}

impl ManualClock {
    pub(crate) fn advance_ms(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl WallClock for ManualClock {
    fn now_unix_ms(&self) -> i64 {
        SystemClock.now_unix_ms() + self.offset_ms.load(Ordering::SeqCst)
    }
}

/// Every observer callback, as a line of text.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    events: Mutex<Vec<String>>,
}

impl Recorder {
    pub(crate) fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }

    fn push(&self, event: String) {
        self.events.lock().unwrap().push(event);
    }
}

impl ToolObserver for Recorder {
    fn served(&self, tool: &str, source: &str, status: ToolStatus) {
        self.push(format!("served {tool} {source} {}", status.as_str()));
    }

    fn gate_held(&self, tool: &str) {
        self.push(format!("gate_held {tool}"));
    }

    fn replayed(&self, tool: &str, result: ReplayResult) {
        self.push(format!("replayed {tool} {}", result.as_str()));
    }

    fn busy(&self, tool: &str, bulkhead: &str) {
        self.push(format!("busy {tool} {bulkhead}"));
    }
}

/// A dispatcher over a fresh store, built from a TOML ladder.
#[derive(Debug)]
pub(crate) struct Harness {
    pub dispatcher: Arc<Dispatcher>,
    pub store: Arc<TestStore>,
    pub clock: Arc<ManualClock>,
    pub observer: Arc<Recorder>,
}

impl Harness {
    pub(crate) fn new(toml: &str) -> Harness {
        let config = parse_tools(toml).unwrap_or_else(|e| panic!("{e}"));
        let store = Arc::new(TestStore::new());
        let clock = Arc::new(ManualClock::default());
        let observer = Arc::new(Recorder::default());
        let env = |name: &str| (name == "TEST_TOOL_TOKEN").then(|| "Bearer s3cret".to_string());
        let dispatcher = Dispatcher::with_env(&config, store.clone(), http_client(), &env)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_observer(observer.clone())
            .with_wall_clock(clock.clone())
            .with_jitter(Arc::new(FixedJitter(1.0)));
        Harness { dispatcher: Arc::new(dispatcher), store, clock, observer }
    }

    pub(crate) async fn call(&self, tool: &str, args: Value) -> ToolOutcome {
        self.call_with(tool, args, CallContext::new()).await.unwrap()
    }

    pub(crate) async fn call_with(
        &self,
        tool: &str,
        args: Value,
        ctx: CallContext,
    ) -> Result<ToolOutcome, ToolError> {
        self.dispatcher.call(&ctx, tool, args).await
    }
}

pub(crate) fn http_client() -> reqwest::Client {
    // reqwest has rustls without a crypto provider of its own.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub(crate) fn with_key(key: &str) -> CallContext {
    CallContext::new().idempotency_key(key)
}

/// The provenance contract of a stale answer (the spec's test): ok, degraded, fidelity stale,
/// within the staleness budget, steering wording intact, answered fast.
pub(crate) fn assert_provenance(envelope: &Value, max_age_minutes: i64) -> Result<(), String> {
    let field = |name: &str| envelope.get(name).ok_or_else(|| format!("no `{name}` in {envelope}"));
    if field("status")? != "ok" {
        return Err(format!("status is not ok: {envelope}"));
    }
    if field("degraded")? != true {
        return Err(format!("not marked degraded: {envelope}"));
    }
    if field("fidelity")? != "stale" {
        return Err(format!("fidelity is not stale: {envelope}"));
    }
    let age = field("age_minutes")?.as_i64().ok_or("age_minutes is not a number")?;
    if age > max_age_minutes {
        return Err(format!("age {age} min is over the budget of {max_age_minutes}"));
    }
    let detail = field("detail")?.as_str().ok_or("detail is not text")?;
    if !detail.to_lowercase().contains("do not claim") {
        return Err(format!("detail lost its steering wording: {detail}"));
    }
    let elapsed = field("elapsed_ms")?.as_u64().ok_or("elapsed_ms is not a number")?;
    if elapsed >= 500 {
        return Err(format!("answered in {elapsed} ms, not under 500"));
    }
    Ok(())
}

/// The envelope without its provenance annotation.
pub(crate) fn strip_provenance(envelope: &Value) -> Value {
    let mut stripped = envelope.clone();
    if let Some(map) = stripped.as_object_mut() {
        for field in PROVENANCE_FIELDS {
            map.remove(*field);
        }
    }
    stripped
}

/// The outbox item of `key`.
pub(crate) async fn outbox_item(store: &TestStore, key: &str) -> OutboxItem {
    let items = store.outbox_list(None, 100).await.unwrap();
    items
        .into_iter()
        .find(|item| item.idempotency_key == key)
        .unwrap_or_else(|| panic!("no outbox item for {key}"))
}

/// A tools config from TOML as rein.toml writes it, validated (environment aside), with errors
/// by key as the runtime reports them.
pub(crate) fn parse_tools(text: &str) -> Result<ToolsConfig, rein_tools::ConfigError> {
    let single = |key: &str, message: String| rein_tools::ConfigError {
        problems: vec![rein_tools::ConfigProblem { key: key.to_string(), message }],
    };
    let deserializer =
        toml::Deserializer::parse(text).map_err(|error| single("(file)", error.to_string()))?;
    let config: ToolsConfig = serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let key = error.path().to_string();
        let key = if key == "." || key.is_empty() { "(file)".to_string() } else { key };
        single(&key, error.into_inner().message().to_string())
    })?;
    config.validate()?;
    Ok(config)
}
