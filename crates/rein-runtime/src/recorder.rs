//! The recorder: finished calls leave the request path here. A model call hands its report, its
//! [`CallInfo`] and its SLI record ([`Finished`]) to a bounded queue and returns, and a tool
//! call its [`ToolCallInfo`] ([`FinishedTool`]); one worker
//! builds each call's trace and writes the queue to the store in batches ([`RecordedCall`]s), and another exports the traces over OTLP through a
//! [`TraceSink`], in batches, each export bounded by its timeout. Nothing waits for the store or
//! the exporter: when a queue is full the call's record or trace is dropped and counted
//! ([`RecorderStats`]), never blocking the caller. The store worker also prunes what `[traces]`
//! no longer keeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rein_core::CallReport;
use rein_core::sli::CallRecord;
use rein_core::trace::{CallInfo, ToolCallInfo, Trace};
use rein_store::ToolStore;
use rein_store::calls::{CallsRetention, RecordedCall, RecordedTool};
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::traces::TracesConfig;

/// Where exported traces go (OTLP in production, a fake in tests).
#[async_trait]
pub trait TraceSink: Send + Sync {
    /// Export `traces`; the spans sent, or why not (never a secret).
    async fn export(&self, traces: &[Trace]) -> Result<usize, String>;
}

/// What the recorder did, read by the gateway's metrics at scrape time.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub records_written: AtomicU64,
    /// Calls whose record was lost: the queue was full, or the store refused the batch.
    pub records_dropped: AtomicU64,
    pub spans_exported: AtomicU64,
    /// Spans not exported because the export queue was full.
    pub spans_dropped_queue: AtomicU64,
    /// Spans in batches the exporter failed to send (down, slow past its timeout, refused).
    pub spans_dropped_export: AtomicU64,
}

/// A finished call, as the request path hands it over.
#[derive(Debug, Clone)]
pub struct Finished {
    pub at_unix_ms: i64,
    pub report: CallReport,
    /// What the trace needs beside the report (its provider kinds are filled in here).
    pub info: CallInfo,
    pub record: CallRecord,
    /// Pinned to one tier by an eval: its trace is kept, its record is not an SLI's.
    pub pinned: bool,
}

/// A finished tool call, as the request path hands it over.
#[derive(Debug, Clone)]
pub struct FinishedTool {
    pub at_unix_ms: i64,
    pub info: ToolCallInfo,
    /// Not answered `ok` on the first try (`ToolOutcome::first_try`): its trace is kept for
    /// the whole retention window.
    pub notable: bool,
}

/// Each provider's `gen_ai.provider.name` by its configured name, as the config in force says.
pub type ProviderKinds = Arc<dyn Fn() -> std::collections::BTreeMap<String, String> + Send + Sync>;

enum Item {
    Call(Box<Finished>),
    Tool(Box<FinishedTool>),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// The queue finished calls go to.
pub struct Recorder {
    tx: Option<mpsc::Sender<Item>>,
    rx: std::sync::Mutex<Option<mpsc::Receiver<Item>>>,
    stats: Arc<RecorderStats>,
    config: TracesConfig,
    sink: Option<Arc<dyn TraceSink>>,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("enabled", &self.tx.is_some())
            .field("exports", &self.sink.is_some())
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// A recorder for `config`, exporting through `sink` when given. Nothing is written until
    /// [`Recorder::spawn`] starts its workers.
    pub fn new(config: &TracesConfig, sink: Option<Arc<dyn TraceSink>>) -> Self {
        let (tx, rx) = if config.enabled {
            let (tx, rx) = mpsc::channel(config.queue);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        Self {
            tx,
            rx: std::sync::Mutex::new(rx),
            stats: Arc::new(RecorderStats::default()),
            config: config.clone(),
            sink,
        }
    }

    /// Whether calls are recorded at all.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    /// Whether traces are exported.
    pub fn exports(&self) -> bool {
        self.sink.is_some()
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    /// Queue a finished call; never waits. `false`: the queue was full (or recording is off) and
    /// the call was dropped (counted).
    pub fn submit(&self, call: Finished) -> bool {
        self.queue(Item::Call(Box::new(call)))
    }

    /// Queue a finished tool call, like [`Recorder::submit`].
    pub fn submit_tool(&self, call: FinishedTool) -> bool {
        self.queue(Item::Tool(Box::new(call)))
    }

    fn queue(&self, item: Item) -> bool {
        let Some(tx) = &self.tx else { return false };
        match tx.try_send(item) {
            Ok(()) => true,
            Err(_) => {
                self.stats.records_dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Wait (at most `wait`) until every call queued before now is written, so a read that
    /// follows sees it.
    pub async fn flush(&self, wait: Duration) {
        let Some(tx) = &self.tx else { return };
        let (done, written) = oneshot::channel();
        let send = tx.send(Item::Flush(done));
        let _ = tokio::time::timeout(wait, async {
            if send.await.is_ok() {
                let _ = written.await;
            }
        })
        .await;
    }

    /// Start the store writer (with the pruning) and the exporter; both end when `stop` turns
    /// true, the writer after writing what is queued. A second call starts nothing.
    pub fn spawn(
        &self,
        store: Arc<dyn ToolStore>,
        kinds: ProviderKinds,
        stop: watch::Receiver<bool>,
    ) {
        let Some(rx) = self.rx.lock().ok().and_then(|mut rx| rx.take()) else { return };
        let exports = self.sink.clone().map(|sink| {
            let (tx, rx) = mpsc::channel::<Trace>(self.config.queue);
            tokio::spawn(export_loop(sink, rx, self.config.batch, self.stats.clone()));
            tx
        });
        let writer = Writer { store, kinds, stats: self.stats.clone(), exports };
        tokio::spawn(write_loop(writer, rx, self.config.clone(), stop));
    }
}

/// How often the store worker prunes.
const PRUNE_EVERY: Duration = Duration::from_secs(300);

/// What the store worker writes with.
struct Writer {
    store: Arc<dyn ToolStore>,
    kinds: ProviderKinds,
    stats: Arc<RecorderStats>,
    exports: Option<mpsc::Sender<Trace>>,
}

async fn write_loop(
    writer: Writer,
    mut rx: mpsc::Receiver<Item>,
    config: TracesConfig,
    mut stop: watch::Receiver<bool>,
) {
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let first = tokio::select! {
            item = rx.recv() => match item {
                Some(item) => item,
                None => return,
            },
            _ = prune.tick() => {
                prune_once(&*writer.store, &config).await;
                continue;
            }
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    break;
                }
                continue;
            }
        };
        let (batch, stopping) = fill(first, &mut rx, &config, &mut stop).await;
        writer.write(batch).await;
        if stopping {
            break;
        }
    }
    rx.close();
    // Write what is already queued, then end.
    let mut rest = Vec::new();
    while let Ok(item) = rx.try_recv() {
        rest.push(item);
    }
    writer.write(rest).await;
}

/// A batch that starts with `first`: the queue's next items, until the batch holds
/// `[traces] batch` items, `flush_ms` has passed since `first`, a flush is asked for or the
/// recorder stops (then `true`). One write, one transaction, then carries the calls of
/// `flush_ms` instead of one each.
async fn fill(
    first: Item,
    rx: &mut mpsc::Receiver<Item>,
    config: &TracesConfig,
    stop: &mut watch::Receiver<bool>,
) -> (Vec<Item>, bool) {
    let mut flush = matches!(first, Item::Flush(_));
    let mut batch = vec![first];
    let due = tokio::time::sleep(config.flush);
    tokio::pin!(due);
    while batch.len() < config.batch && !flush {
        // What is queued already goes in without waiting.
        let item = match rx.try_recv() {
            Ok(item) => item,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => tokio::select! {
                item = rx.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
                _ = &mut due => break,
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return (batch, true);
                    }
                    continue;
                }
            },
        };
        flush = matches!(item, Item::Flush(_));
        batch.push(item);
    }
    (batch, false)
}

impl Writer {
    async fn write(&self, items: Vec<Item>) {
        let Writer { store, kinds, stats, exports } = self;
        let kinds = kinds();
        let mut calls = Vec::with_capacity(items.len());
        let mut tools = Vec::new();
        let mut flushes = Vec::new();
        for item in items {
            match item {
                Item::Call(call) => calls.push(recorded(*call, &kinds)),
                Item::Tool(call) => tools.push(recorded_tool(*call)),
                Item::Flush(done) => flushes.push(done),
            }
        }
        let batch = Batch { calls, tools, flushes };
        write_batch(&**store, batch, stats, exports.as_ref()).await;
    }
}

/// A finished call's row: its record and its trace.
fn recorded(call: Finished, kinds: &std::collections::BTreeMap<String, String>) -> RecordedCall {
    let Finished { at_unix_ms, report, mut info, record, pinned } = call;
    info.provider_kinds = kinds.clone();
    let request_id = info.request_id.clone();
    let trace = Trace::of_call(&report, info);
    RecordedCall {
        at_unix_ms,
        request_id,
        trace_id: trace.trace_id.clone(),
        notable: RecordedCall::is_notable(&record),
        record,
        trace: Some(trace),
        eval: pinned,
    }
}

/// A finished tool call's row: its trace, and what a list shows of it.
fn recorded_tool(call: FinishedTool) -> RecordedTool {
    let FinishedTool { at_unix_ms, info, notable } = call;
    let (tool, status, rung) = (info.tool.clone(), info.status.clone(), info.served_by.clone());
    let trace = Trace::of_tool_call(info);
    let rungs = trace.spans.len().saturating_sub(1);
    RecordedTool {
        at_unix_ms,
        request_id: trace.request_id.clone(),
        trace_id: trace.trace_id.clone(),
        tool,
        status,
        rung,
        rungs: i64::try_from(rungs).unwrap_or(i64::MAX),
        elapsed_ms: i64::try_from(trace.elapsed_ms()).unwrap_or(i64::MAX),
        notable,
        trace: Some(trace),
    }
}

/// One write to the store.
struct Batch {
    calls: Vec<RecordedCall>,
    tools: Vec<RecordedTool>,
    flushes: Vec<oneshot::Sender<()>>,
}

async fn write_batch(
    store: &dyn ToolStore,
    batch: Batch,
    stats: &RecorderStats,
    exports: Option<&mpsc::Sender<Trace>>,
) {
    let Batch { calls, tools, flushes } = batch;
    if let Some(exports) = exports {
        let traces = calls.iter().filter_map(|c| c.trace.as_ref());
        for trace in traces.chain(tools.iter().filter_map(|t| t.trace.as_ref())) {
            if exports.try_send(trace.clone()).is_err() {
                stats.spans_dropped_queue.fetch_add(trace.spans.len() as u64, Ordering::Relaxed);
            }
        }
    }
    if !calls.is_empty() || !tools.is_empty() {
        let count = (calls.len() + tools.len()) as u64;
        match store.calls_record(&calls, &tools).await {
            Ok(()) => {
                stats.records_written.fetch_add(count, Ordering::Relaxed);
            }
            Err(error) => {
                stats.records_dropped.fetch_add(count, Ordering::Relaxed);
                tracing::warn!(%error, calls = count, "recorded calls could not be written");
            }
        }
    }
    for done in flushes {
        let _ = done.send(());
    }
}

async fn prune_once(store: &dyn ToolStore, config: &TracesConfig) {
    let now = rein_core::clock::unix_ms() as i64;
    let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let retention = CallsRetention {
        records_before_unix_ms: now.saturating_sub(ms(config.records_retention)),
        traces_before_unix_ms: now.saturating_sub(ms(config.retention)),
        keep_last: i64::from(config.keep_last),
    };
    if let Err(error) = store.calls_prune(&retention).await {
        tracing::warn!(%error, "recorded calls could not be pruned");
    }
}

async fn export_loop(
    sink: Arc<dyn TraceSink>,
    mut rx: mpsc::Receiver<Trace>,
    batch: usize,
    stats: Arc<RecorderStats>,
) {
    while let Some(first) = rx.recv().await {
        let mut traces = vec![first];
        let mut spans = traces[0].spans.len();
        while spans < batch {
            match rx.try_recv() {
                Ok(trace) => {
                    spans += trace.spans.len();
                    traces.push(trace);
                }
                Err(_) => break,
            }
        }
        match sink.export(&traces).await {
            Ok(sent) => {
                stats.spans_exported.fetch_add(sent as u64, Ordering::Relaxed);
            }
            Err(error) => {
                stats.spans_dropped_export.fetch_add(spans as u64, Ordering::Relaxed);
                tracing::warn!(%error, spans, "traces could not be exported");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use rein_core::Outcome;
    use rein_core::sli::CallRecord;

    use super::*;

    struct Slow {
        got: Mutex<Vec<String>>,
        fail: bool,
        delay: Duration,
    }

    #[async_trait]
    impl TraceSink for Slow {
        async fn export(&self, traces: &[Trace]) -> Result<usize, String> {
            tokio::time::sleep(self.delay).await;
            if self.fail {
                return Err("collector is down".into());
            }
            self.got.lock().unwrap().extend(traces.iter().map(|t| t.request_id.clone()));
            Ok(traces.iter().map(|t| t.spans.len()).sum())
        }
    }

    fn call(n: u32) -> Finished {
        let record = CallRecord {
            route: "support".into(),
            tier: Some("primary".into()),
            labels: BTreeMap::new(),
            outcome: Outcome::Answered,
            failover: false,
            attempts: 1,
            repaired: false,
            elapsed_ms: 5,
            first_token_ms: None,
            deadline_ms: 1_000,
            escalation: None,
            covered: None,
            quality: None,
            quality_probability: None,
        };
        let report = CallReport {
            route: "support".into(),
            settings_version: None,
            outcome: Outcome::Answered,
            served_by: None,
            steps: vec![rein_core::Step::Attempt(rein_core::AttemptRecord {
                tier: 0,
                tier_name: "primary".into(),
                provider: "openai-main".into(),
                model: "gpt-x".into(),
                number: 1,
                started_ms: 0,
                elapsed_ms: 5,
                failure: None,
                classified: None,
                probe: false,
            })],
            alerts: vec![],
            elapsed_ms: 5,
            rejected_draft: None,
            labels: BTreeMap::new(),
        };
        let info = CallInfo { request_id: format!("req_{n}"), ..CallInfo::default() };
        let at_unix_ms = rein_core::clock::unix_ms() as i64 + i64::from(n);
        Finished { at_unix_ms, report, info, record, pinned: false }
    }

    fn kinds() -> ProviderKinds {
        Arc::new(|| BTreeMap::from([("openai-main".to_string(), "openai".to_string())]))
    }

    fn config(queue: usize) -> TracesConfig {
        TracesConfig { queue, batch: 4, ..TracesConfig::default() }
    }

    async fn store() -> (tempfile::TempDir, Arc<dyn ToolStore>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let store = rein_store::tools::open_tool_store(path.to_str().unwrap(), None).await.unwrap();
        (dir, store)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_are_written_in_batches_and_a_flush_makes_them_readable() {
        let (_dir, store) = store().await;
        let sink = Arc::new(Slow { got: Mutex::new(vec![]), fail: false, delay: Duration::ZERO });
        let recorder = Recorder::new(&config(64), Some(sink.clone()));
        let (_stop_tx, stop) = watch::channel(false);
        recorder.spawn(store.clone(), kinds(), stop);
        for n in 0..10 {
            assert!(recorder.submit(call(n)));
        }
        recorder.flush(Duration::from_secs(10)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 10);
        let trace = store.trace_get("req_3").await.unwrap();
        assert_eq!(trace.len(), 1, "the trace is built and kept");
        let attempt = &trace[0].spans[1];
        assert_eq!(
            attempt.attribute("gen_ai.provider.name"),
            Some(&rein_core::trace::Value::from("openai")),
            "provider kinds come from the config in force"
        );
        assert_eq!(recorder.stats().records_written.load(Ordering::Relaxed), 10);
        for _ in 0..100 {
            if sink.got.lock().unwrap().len() == 10 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(sink.got.lock().unwrap().len(), 10, "every trace exported");
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_flush_ms_to_fill_then_is_written_in_one_write() {
        let (_dir, store) = store().await;
        let config = TracesConfig { batch: 64, flush: Duration::from_secs(5), ..config(64) };
        let recorder = Recorder::new(&config, None);
        let (stop_tx, stop) = watch::channel(false);
        recorder.spawn(store.clone(), kinds(), stop);
        for n in 0..3 {
            assert!(recorder.submit(call(n)));
        }
        tokio::time::sleep(Duration::from_secs(4)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 0, "still filling");
        assert!(recorder.submit(call(3)));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 4, "flush_ms is up");
        assert_eq!(recorder.stats().records_written.load(Ordering::Relaxed), 4);

        // A stop writes the batch being filled at once.
        assert!(recorder.submit(call(4)));
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop_tx.send_replace(true);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 5, "written on stop");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_is_written_without_waiting_for_flush_ms() {
        let (_dir, store) = store().await;
        let config = TracesConfig { batch: 4, flush: Duration::from_secs(60), ..config(64) };
        let recorder = Recorder::new(&config, None);
        let (_stop_tx, stop) = watch::channel(false);
        recorder.spawn(store.clone(), kinds(), stop);
        for n in 0..5 {
            assert!(recorder.submit(call(n)));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 4, "one full batch");
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_and_counts_and_never_waits() {
        // No workers: nothing drains the queue of two.
        let recorder = Recorder::new(&config(2), None);
        assert!(recorder.submit(call(1)));
        assert!(recorder.submit(call(2)));
        assert!(!recorder.submit(call(3)));
        assert_eq!(recorder.stats().records_dropped.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_exporter_loses_spans_counted_and_the_records_still_land() {
        let (_dir, store) = store().await;
        let sink = Arc::new(Slow { got: Mutex::new(vec![]), fail: true, delay: Duration::ZERO });
        let recorder = Recorder::new(&config(64), Some(sink));
        let (_stop_tx, stop) = watch::channel(false);
        recorder.spawn(store.clone(), kinds(), stop);
        let with_spans = call(1);
        recorder.submit(with_spans);
        recorder.flush(Duration::from_secs(10)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 1);
        for _ in 0..100 {
            if recorder.stats().spans_dropped_export.load(Ordering::Relaxed) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(recorder.stats().spans_dropped_export.load(Ordering::Relaxed), 2);
        assert_eq!(recorder.stats().spans_exported.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn recording_off_takes_nothing() {
        let off = TracesConfig { enabled: false, ..TracesConfig::default() };
        let recorder = Recorder::new(&off, None);
        assert!(!recorder.enabled());
        assert!(!recorder.submit(call(1)));
        recorder.flush(Duration::from_secs(1)).await;
    }
}
