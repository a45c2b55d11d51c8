//! The recorder: finished calls leave the request path here. A model call hands its report, its
//! [`CallInfo`] and its SLI record ([`Finished`]) to a bounded queue and returns, and a tool call
//! its [`ToolCallInfo`] ([`FinishedTool`]); one worker builds the calls' traces and writes the
//! queue to the store in batches ([`RecordedCall`]s), and another exports the traces over OTLP
//! through a [`TraceSink`], in batches, each export bounded by its timeout. Nothing waits for the
//! store or the exporter: when a queue is full the call's record or trace is dropped and counted
//! ([`RecorderStats`]), never blocking the caller. Every call's record is written; a routine call's
//! trace (answered on the first try, as it was) only while its route or tool is under `[traces]
//! routine_per_second` (a token bucket per route and per tool), so a busy gateway does not write
//! thousands of traces a second that the newest-`keep_last` rule throws away minutes later. Traces
//! are exported whether written or not. The store worker also prunes what `[traces]` no longer
//! keeps. The gateway runs both workers on a thread of their own, so a batch's work never holds
//! an event loop's connections, and stops them after its connections have drained.

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
    /// Times the store worker woke to look at the queue while a batch filled: about one a
    /// batch (its deadline, a full batch, a flush), not one a call.
    pub writer_wakeups: AtomicU64,
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
    /// Wakes the store worker while a batch fills: the batch is full (or the queue half full,
    /// if that comes first), or a flush waits.
    wake: Arc<tokio::sync::Notify>,
    /// How many queued calls ring `wake`.
    wake_at: usize,
    rx: std::sync::Mutex<Option<mpsc::Receiver<Item>>>,
    stats: Arc<RecorderStats>,
    config: TracesConfig,
    sink: Option<Arc<dyn TraceSink>>,
    /// The stop of workers started by [`Recorder::spawn_on_own_thread`] (dropped with the
    /// recorder, which stops them too), and what tells they ended.
    own: std::sync::Mutex<Option<(watch::Sender<bool>, oneshot::Receiver<()>)>>,
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
            wake: Arc::new(tokio::sync::Notify::new()),
            wake_at: config.batch.min(config.queue.div_ceil(2)).max(1),
            rx: std::sync::Mutex::new(rx),
            stats: Arc::new(RecorderStats::default()),
            config: config.clone(),
            sink,
            own: std::sync::Mutex::new(None),
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
            Ok(()) => {
                // A filling batch is not woken by each call, only once enough are queued.
                if tx.max_capacity() - tx.capacity() >= self.wake_at {
                    self.wake.notify_one();
                }
                true
            }
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
                self.wake.notify_one();
                let _ = written.await;
            }
        })
        .await;
    }

    /// Start the store writer (with the pruning) and the exporter on the current tokio runtime;
    /// both end when `stop` turns true, the writer after writing what is queued. A second call
    /// (of this or [`Recorder::spawn_on_own_thread`]) starts nothing.
    pub fn spawn(
        &self,
        store: Arc<dyn ToolStore>,
        kinds: ProviderKinds,
        stop: watch::Receiver<bool>,
    ) {
        if let Some(workers) = self.workers(store, kinds, stop) {
            tokio::spawn(workers.run());
        }
    }

    /// As [`Recorder::spawn`], on a thread of its own (`rein-recorder`, with a current-thread
    /// tokio runtime and that runtime's blocking pool), so the batches' work (each call's row,
    /// its trace, the store's transaction, the export's encoding) never runs on an event loop
    /// that serves requests: on one, a batch of 256 held every connection of that loop for
    /// milliseconds. The workers run until [`Recorder::stop`] (or until the recorder is
    /// dropped), not with the server's stop, so calls that end while connections drain are
    /// written too. Falls back to the current runtime when the runtime or the thread cannot be
    /// made.
    pub fn spawn_on_own_thread(&self, store: Arc<dyn ToolStore>, kinds: ProviderKinds) {
        let (stop_tx, stop) = watch::channel(false);
        let Some(workers) = self.workers(store, kinds, stop) else { return };
        let (ended_tx, ended) = oneshot::channel::<()>();
        if let Ok(mut own) = self.own.lock() {
            *own = Some((stop_tx, ended));
        }
        let workers = async move {
            workers.run().await;
            drop(ended_tx);
        };
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::warn!(%error, "the recorder runs on the serving runtime: no runtime of its own");
                tokio::spawn(workers);
                return;
            }
        };
        // The thread takes the workers from the slot; if it cannot be started, they are still
        // there.
        let slot = Arc::new(std::sync::Mutex::new(Some(workers)));
        let theirs = slot.clone();
        let started = std::thread::Builder::new().name("rein-recorder".into()).spawn(move || {
            let workers = theirs.lock().ok().and_then(|mut workers| workers.take());
            if let Some(workers) = workers {
                runtime.block_on(workers);
            }
        });
        if let Err(error) = started {
            tracing::warn!(%error, "the recorder runs on the serving runtime: no thread of its own");
            if let Some(workers) = slot.lock().ok().and_then(|mut workers| workers.take()) {
                tokio::spawn(workers);
            }
        }
    }

    /// Stop the workers [`Recorder::spawn_on_own_thread`] started once they have written what
    /// is queued, waiting at most `wait` for them; calls submitted after this are dropped
    /// (counted). Nothing to do for workers started otherwise.
    pub async fn stop(&self, wait: Duration) {
        let own = self.own.lock().ok().and_then(|mut own| own.take());
        let Some((stop, ended)) = own else { return };
        stop.send_replace(true);
        if tokio::time::timeout(wait, ended).await.is_err() {
            tracing::warn!(
                wait_ms = wait.as_millis() as u64,
                "the recorder did not finish writing in time; calls still queued are not written"
            );
        }
    }

    /// The workers, once: `None` when recording is off or they were taken already.
    fn workers(
        &self,
        store: Arc<dyn ToolStore>,
        kinds: ProviderKinds,
        stop: watch::Receiver<bool>,
    ) -> Option<Workers> {
        let rx = self.rx.lock().ok().and_then(|mut rx| rx.take())?;
        let (exports, export) = match self.sink.clone() {
            Some(sink) => {
                let (tx, rx) = mpsc::channel::<Trace>(self.config.queue);
                (Some(tx), Some((sink, rx)))
            }
            None => (None, None),
        };
        let routine = RoutineTraces::new(self.config.routine_per_second);
        let writer = Writer { store, kinds, stats: self.stats.clone(), exports, routine };
        let queue = Queue { rx, wake: self.wake.clone() };
        Some(Workers { writer, queue, config: self.config.clone(), stop, export })
    }
}

/// The recorder's two workers, ready to run wherever they are put.
struct Workers {
    writer: Writer,
    queue: Queue,
    config: TracesConfig,
    stop: watch::Receiver<bool>,
    export: Option<(Arc<dyn TraceSink>, mpsc::Receiver<Trace>)>,
}

impl Workers {
    /// Both workers; ends when the writer has written what was queued at the stop and the
    /// exporter has sent what the writer handed it.
    async fn run(self) {
        let Self { writer, queue, config, stop, export } = self;
        let stats = writer.stats.clone();
        let export = export
            .map(|(sink, rx)| tokio::spawn(export_loop(sink, rx, config.batch, stats.clone())));
        write_loop(writer, queue, config, stop).await;
        if let Some(export) = export {
            let _ = export.await;
        }
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
    routine: RoutineTraces,
}

/// Which routine calls' traces are written: a token bucket per route (model calls) and per tool
/// (tool calls), refilled at `per_second` tokens a second by the calls' own clock (their
/// `at_unix_ms`) and holding at most `per_second`, so a quiet route keeps every trace and a busy
/// one writes at most `per_second` a second.
struct RoutineTraces {
    per_second: u32,
    routes: Buckets,
    tools: Buckets,
}

/// Buckets by route or tool name (configured names, hashed with foldhash at every call).
type Buckets = std::collections::HashMap<String, Bucket, foldhash::fast::RandomState>;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at_unix_ms: i64,
}

/// Routes and tools come from the config; past this many buckets (a config reloaded many times
/// over) the maps start again, full.
const MAX_BUCKETS: usize = 4_096;

impl RoutineTraces {
    fn new(per_second: u32) -> Self {
        Self { per_second, routes: Default::default(), tools: Default::default() }
    }

    /// Whether the routine call of `route` at `at_unix_ms` writes its trace.
    fn route(&mut self, route: &str, at_unix_ms: i64) -> bool {
        Self::take(&mut self.routes, self.per_second, route, at_unix_ms)
    }

    /// Whether the routine call of `tool` at `at_unix_ms` writes its trace.
    fn tool(&mut self, tool: &str, at_unix_ms: i64) -> bool {
        Self::take(&mut self.tools, self.per_second, tool, at_unix_ms)
    }

    fn take(buckets: &mut Buckets, per_second: u32, key: &str, at_unix_ms: i64) -> bool {
        if per_second == 0 {
            return false;
        }
        let rate = f64::from(per_second);
        let bucket = match buckets.get_mut(key) {
            Some(bucket) => bucket,
            None => {
                if buckets.len() >= MAX_BUCKETS {
                    buckets.clear();
                }
                buckets.entry(key.to_string()).or_insert(Bucket { tokens: rate, at_unix_ms })
            }
        };
        // Calls of one batch may come slightly out of order: time never runs back.
        let elapsed_ms = at_unix_ms.saturating_sub(bucket.at_unix_ms).max(0);
        bucket.tokens = (bucket.tokens + elapsed_ms as f64 * rate / 1_000.0).min(rate);
        bucket.at_unix_ms = bucket.at_unix_ms.max(at_unix_ms);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// The store worker's end of the queue.
struct Queue {
    rx: mpsc::Receiver<Item>,
    wake: Arc<tokio::sync::Notify>,
}

async fn write_loop(
    mut writer: Writer,
    mut queue: Queue,
    config: TracesConfig,
    mut stop: watch::Receiver<bool>,
) {
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let first = tokio::select! {
            item = queue.rx.recv() => match item {
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
        let (batch, stopping) = fill(first, &mut queue, &config, &mut stop, &writer.stats).await;
        writer.write(batch).await;
        if stopping {
            break;
        }
    }
    queue.rx.close();
    // Write what is already queued, then end.
    let mut rest = Vec::new();
    while let Ok(item) = queue.rx.try_recv() {
        rest.push(item);
    }
    writer.write(rest).await;
}

/// A batch that starts with `first`: the queue's next items, until the batch holds
/// `[traces] batch` items, `flush_ms` has passed since `first`, a flush is asked for or the
/// recorder stops (then `true`). One write, one transaction, then carries the calls of
/// `flush_ms` instead of one each. While it fills, the worker does not wait on the queue (which
/// would wake it for every call) but on its deadline and on [`Recorder`]'s wake, which a full
/// batch or a flush rings; then it takes what is queued.
async fn fill(
    first: Item,
    queue: &mut Queue,
    config: &TracesConfig,
    stop: &mut watch::Receiver<bool>,
    stats: &RecorderStats,
) -> (Vec<Item>, bool) {
    let mut flush = matches!(first, Item::Flush(_));
    let mut batch = vec![first];
    let due = tokio::time::sleep(config.flush);
    tokio::pin!(due);
    loop {
        // What is queued already goes in without waiting.
        while batch.len() < config.batch && !flush {
            match queue.rx.try_recv() {
                Ok(item) => {
                    flush = matches!(item, Item::Flush(_));
                    batch.push(item);
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return (batch, false),
            }
        }
        // Full, flushed, or past the deadline (what was queued by then went in above).
        if batch.len() >= config.batch || flush || due.is_elapsed() {
            return (batch, false);
        }
        tokio::select! {
            _ = &mut due => {}
            _ = queue.wake.notified() => {}
            changed = stop.changed() => {
                if changed.is_err() || *stop.borrow() {
                    return (batch, true);
                }
            }
        }
        stats.writer_wakeups.fetch_add(1, Ordering::Relaxed);
    }
}

impl Writer {
    async fn write(&mut self, items: Vec<Item>) {
        let kinds = (self.kinds)();
        let mut room = ExportRoom::now(self.exports.as_ref());
        let mut calls = Vec::with_capacity(items.len());
        let mut tools = Vec::new();
        let mut flushes = Vec::new();
        let mut traces = Vec::new();
        for item in items {
            match item {
                Item::Call(call) => {
                    let keep = call.pinned
                        || RecordedCall::is_notable(&call.record)
                        || self.routine.route(&call.record.route, call.at_unix_ms);
                    let export = room.take(|| Trace::spans_of_call(&call.report, &call.info));
                    let (row, trace) = recorded(*call, &kinds, keep, export);
                    calls.push(row);
                    traces.extend(trace);
                }
                Item::Tool(call) => {
                    let keep = call.notable || self.routine.tool(&call.info.tool, call.at_unix_ms);
                    let export = room.take(|| Trace::spans_of_tool_call(&call.info));
                    let (row, trace) = recorded_tool(*call, keep, export);
                    tools.push(row);
                    traces.extend(trace);
                }
                Item::Flush(done) => flushes.push(done),
            }
        }
        if room.unbuilt > 0 {
            self.stats.spans_dropped_queue.fetch_add(room.unbuilt, Ordering::Relaxed);
        }
        let batch = Batch { calls, tools, flushes, traces };
        write_batch(&*self.store, batch, &self.stats, self.exports.as_ref()).await;
    }
}

/// The exporter's room when a batch is written. A trace past it would only be dropped at the
/// queue, so it is counted dropped there and never built: building every call's trace for an
/// exporter that cannot keep up cost more CPU than the export itself.
struct ExportRoom {
    /// `None`: no exporter.
    room: Option<usize>,
    /// The spans of the traces not built for want of room.
    unbuilt: u64,
}

impl ExportRoom {
    fn now(exports: Option<&mpsc::Sender<Trace>>) -> Self {
        Self { room: exports.map(|exports| exports.capacity()), unbuilt: 0 }
    }

    /// Whether the next call's trace is built for export; when there is no room, its `spans`
    /// are counted and `false`.
    fn take(&mut self, spans: impl FnOnce() -> usize) -> bool {
        match &mut self.room {
            None => false,
            Some(0) => {
                self.unbuilt += spans() as u64;
                false
            }
            Some(room) => {
                *room -= 1;
                true
            }
        }
    }
}

/// A finished call's row: its record, and its trace when `keep`; the trace to export too when
/// `export`. A trace neither kept nor exported is never built.
fn recorded(
    call: Finished,
    kinds: &std::collections::BTreeMap<String, String>,
    keep: bool,
    export: bool,
) -> (RecordedCall, Option<Trace>) {
    let Finished { at_unix_ms, report, mut info, record, pinned } = call;
    let request_id = info.request_id.clone();
    let notable = RecordedCall::is_notable(&record);
    let (trace_id, trace) = if keep || export {
        info.provider_kinds = kinds.clone();
        let trace = Trace::of_call(&report, info);
        (trace.trace_id.clone(), Some(trace))
    } else {
        (trace_id_of(info.ids), None)
    };
    let (kept, exported) = split(trace, keep, export);
    let row = RecordedCall {
        at_unix_ms,
        request_id,
        trace_id,
        notable,
        record,
        trace: kept,
        eval: pinned,
    };
    (row, exported)
}

/// A finished tool call's row: what a list shows of it, and its trace when `keep`; the trace to
/// export too when `export`.
fn recorded_tool(call: FinishedTool, keep: bool, export: bool) -> (RecordedTool, Option<Trace>) {
    let FinishedTool { at_unix_ms, info, notable } = call;
    let (tool, status, rung) = (info.tool.clone(), info.status.clone(), info.served_by.clone());
    let request_id = info.request_id.clone();
    let (trace_id, rungs, elapsed_ms, trace) = if keep || export {
        let trace = Trace::of_tool_call(info);
        let rungs = trace.spans.len().saturating_sub(1);
        (trace.trace_id.clone(), rungs, trace.elapsed_ms(), Some(trace))
    } else {
        // What the trace would say: a span per rung that ran, ending with the last of them.
        (trace_id_of(info.ids.clone()), info.notes.spans.len(), info.end_ms(), None)
    };
    let (kept, exported) = split(trace, keep, export);
    let row = RecordedTool {
        at_unix_ms,
        request_id,
        trace_id,
        tool,
        status,
        rung,
        rungs: i64::try_from(rungs).unwrap_or(i64::MAX),
        elapsed_ms: i64::try_from(elapsed_ms).unwrap_or(i64::MAX),
        notable,
        trace: kept,
    };
    (row, exported)
}

/// A call's trace id when its trace is not built: the one it was given, or a new one.
fn trace_id_of(ids: Option<rein_core::trace::TraceIds>) -> String {
    ids.unwrap_or_else(|| rein_core::trace::TraceIds::for_call(None)).trace_id
}

/// The trace for the store and the trace for the exporter (cloned only when both want it).
fn split(trace: Option<Trace>, keep: bool, export: bool) -> (Option<Trace>, Option<Trace>) {
    match (trace, keep, export) {
        (Some(trace), true, true) => (Some(trace.clone()), Some(trace)),
        (trace, true, false) => (trace, None),
        (trace, false, true) => (None, trace),
        _ => (None, None),
    }
}

/// One write to the store.
struct Batch {
    calls: Vec<RecordedCall>,
    tools: Vec<RecordedTool>,
    flushes: Vec<oneshot::Sender<()>>,
    /// Every call's trace, kept or not, when traces are exported.
    traces: Vec<Trace>,
}

async fn write_batch(
    store: &dyn ToolStore,
    batch: Batch,
    stats: &RecorderStats,
    exports: Option<&mpsc::Sender<Trace>>,
) {
    let Batch { calls, tools, flushes, traces } = batch;
    if let Some(exports) = exports {
        for trace in traces {
            let spans = trace.spans.len() as u64;
            if exports.try_send(trace).is_err() {
                stats.spans_dropped_queue.fetch_add(spans, Ordering::Relaxed);
            }
        }
    }
    if !calls.is_empty() || !tools.is_empty() {
        let count = (calls.len() + tools.len()) as u64;
        match store.calls_record(calls, tools).await {
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
    use rein_core::trace::ToolCallInfo;

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

    /// A recorder for `config` writing to a new SQLite store, started; the test keeps the
    /// directory and the stop sender alive.
    async fn started(
        config: &TracesConfig,
        sink: Option<Arc<dyn TraceSink>>,
    ) -> (tempfile::TempDir, Arc<dyn ToolStore>, Recorder, watch::Sender<bool>) {
        let (dir, store) = store().await;
        let recorder = Recorder::new(config, sink);
        let (stop_tx, stop) = watch::channel(false);
        recorder.spawn(store.clone(), kinds(), stop);
        (dir, store, recorder, stop_tx)
    }

    async fn store() -> (tempfile::TempDir, Arc<dyn ToolStore>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.sqlite");
        let store = rein_store::tools::open_tool_store(path.to_str().unwrap(), None).await.unwrap();
        (dir, store)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_are_written_in_batches_and_a_flush_makes_them_readable() {
        let sink = Arc::new(Slow { got: Mutex::new(vec![]), fail: false, delay: Duration::ZERO });
        let (_dir, store, recorder, _stop_tx) = started(&config(64), Some(sink.clone())).await;
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
        let config = TracesConfig { batch: 64, flush: Duration::from_secs(5), ..config(64) };
        let (_dir, store, recorder, stop_tx) = started(&config, None).await;
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
    async fn calls_queued_while_a_batch_fills_do_not_wake_the_writer_each() {
        let config = TracesConfig { batch: 256, flush: Duration::from_secs(5), ..config(4_096) };
        let (_dir, store, recorder, _stop_tx) = started(&config, None).await;
        assert!(recorder.submit(call(0)));
        tokio::time::sleep(Duration::from_millis(10)).await;
        for n in 1..=100 {
            assert!(recorder.submit(call(n)));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(store.calls_since(0, None, 1_000).await.unwrap().len(), 0, "still filling");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(store.calls_since(0, None, 1_000).await.unwrap().len(), 101, "one batch");
        let wakeups = recorder.stats().writer_wakeups.load(Ordering::Relaxed);
        assert!(wakeups <= 2, "the writer woke {wakeups} times for one batch of 101 calls");
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_half_full_is_taken_into_the_filling_batch_and_drops_nothing() {
        // A batch larger than the queue: the queue alone would fill and drop calls.
        let config = TracesConfig { batch: 64, flush: Duration::from_secs(60), ..config(8) };
        let (_dir, store, recorder, _stop_tx) = started(&config, None).await;
        // A call a millisecond: the clock stands still while the writer is in the store (the
        // prune it runs as it starts is on a blocking thread), so only the wake is tested.
        for n in 0..40 {
            assert!(recorder.submit(call(n)), "call {n} was dropped");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert_eq!(recorder.stats().records_dropped.load(Ordering::Relaxed), 0);
        tokio::time::sleep(Duration::from_secs(61)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 40);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_is_answered_without_waiting_for_flush_ms() {
        let config = TracesConfig { batch: 64, flush: Duration::from_secs(60), ..config(64) };
        let (_dir, store, recorder, _stop_tx) = started(&config, None).await;
        assert!(recorder.submit(call(0)));
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(recorder.submit(call(1)));
        let started = tokio::time::Instant::now();
        recorder.flush(Duration::from_secs(30)).await;
        assert!(started.elapsed() < Duration::from_secs(1), "the flush waited for the batch");
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_is_written_without_waiting_for_flush_ms() {
        let config = TracesConfig { batch: 4, flush: Duration::from_secs(60), ..config(64) };
        let (_dir, store, recorder, _stop_tx) = started(&config, None).await;
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

    /// A sink that notes the thread each export runs on.
    struct Threads(Mutex<Vec<String>>);

    #[async_trait]
    impl TraceSink for Threads {
        async fn export(&self, traces: &[Trace]) -> Result<usize, String> {
            let name = std::thread::current().name().unwrap_or("unnamed").to_string();
            self.0.lock().unwrap().push(name);
            Ok(traces.iter().map(|t| t.spans.len()).sum())
        }
    }

    #[tokio::test]
    async fn on_a_thread_of_its_own_the_recorder_works_off_the_serving_loop_until_stopped() {
        let sink = Arc::new(Threads(Mutex::new(vec![])));
        let (_dir, store) = store().await;
        let recorder = Recorder::new(&config(64), Some(sink.clone()));
        recorder.spawn_on_own_thread(store.clone(), kinds());
        for n in 0..3 {
            assert!(recorder.submit(call(n)));
        }
        recorder.flush(Duration::from_secs(10)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 3);

        // Queued before the stop: written by the time it returns; after it: dropped, counted.
        assert!(recorder.submit(call(3)));
        recorder.stop(Duration::from_secs(10)).await;
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 4);
        assert!(!recorder.submit(call(4)), "the queue is closed");
        assert_eq!(recorder.stats().records_dropped.load(Ordering::Relaxed), 1);

        let threads = sink.0.lock().unwrap().clone();
        assert!(!threads.is_empty(), "traces were exported");
        assert!(threads.iter().all(|name| name == "rein-recorder"), "exported on {threads:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_exporter_loses_spans_counted_and_the_records_still_land() {
        let sink = Arc::new(Slow { got: Mutex::new(vec![]), fail: true, delay: Duration::ZERO });
        let (_dir, store, recorder, _stop_tx) = started(&config(64), Some(sink)).await;
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

    /// `call(n)` for `route` at `at_unix_ms`, notable (answered after a retry) when asked.
    fn call_at(n: u32, route: &str, at_unix_ms: i64, notable: bool) -> Finished {
        let mut call = call(n);
        call.at_unix_ms = at_unix_ms;
        call.record.route = route.into();
        call.report.route = route.into();
        if notable {
            call.record.attempts = 2;
        }
        call
    }

    async fn kept(store: &Arc<dyn ToolStore>, request_id: &str) -> bool {
        !store.trace_get(request_id).await.unwrap().is_empty()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn routine_traces_are_written_up_to_the_rate_per_route_and_notable_ones_always() {
        let sink = Arc::new(Slow { got: Mutex::new(vec![]), fail: false, delay: Duration::ZERO });
        let config = TracesConfig { routine_per_second: 2, batch: 64, ..config(64) };
        let (_dir, store, recorder, _stop_tx) = started(&config, Some(sink.clone())).await;
        let t0 = rein_core::clock::unix_ms() as i64;
        // Five routine calls of one route in the same millisecond: a burst of two is written.
        for n in 0..5 {
            assert!(recorder.submit(call_at(n, "support", t0, false)));
        }
        // A notable call past the rate, and another route's routine call.
        assert!(recorder.submit(call_at(5, "support", t0, true)));
        assert!(recorder.submit(call_at(6, "billing", t0, false)));
        // Half a second later one token is back; a second later the bucket is full (two).
        assert!(recorder.submit(call_at(7, "support", t0 + 500, false)));
        assert!(recorder.submit(call_at(8, "support", t0 + 500, false)));
        for n in 9..12 {
            assert!(recorder.submit(call_at(n, "support", t0 + 5_000, false)));
        }
        // A pinned (eval) call keeps its trace whatever the rate.
        let mut pinned = call_at(12, "support", t0 + 5_000, false);
        pinned.pinned = true;
        assert!(recorder.submit(pinned));
        recorder.flush(Duration::from_secs(10)).await;

        let mut written = Vec::new();
        for n in 0..13 {
            if kept(&store, &format!("req_{n}")).await {
                written.push(n);
            }
        }
        assert_eq!(written, vec![0, 1, 5, 6, 7, 9, 10, 12]);
        // Every record (the eval's is no SLI's).
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len(), 12);
        let listed = store.traces_list(&Default::default(), 100).await.unwrap();
        assert_eq!(listed.len(), 8, "a list shows the written traces only");
        for _ in 0..100 {
            if sink.got.lock().unwrap().len() == 13 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(sink.got.lock().unwrap().len(), 13, "every trace exported, written or not");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn routine_traces_off_writes_only_notable_ones_and_the_rows_keep_their_trace_ids() {
        let config = TracesConfig { routine_per_second: 0, ..config(64) };
        let (_dir, store, recorder, _stop_tx) = started(&config, None).await;
        let t0 = rein_core::clock::unix_ms() as i64;
        assert!(recorder.submit(call_at(1, "support", t0, false)));
        assert!(recorder.submit(call_at(2, "support", t0 + 10_000, true)));
        let tool = |n: u32, notable: bool| FinishedTool {
            at_unix_ms: t0,
            info: ToolCallInfo {
                request_id: format!("tool_{n}"),
                tool: "lookup".into(),
                status: if notable { "refused".into() } else { "ok".into() },
                elapsed_ms: 7,
                ..ToolCallInfo::default()
            },
            notable,
        };
        assert!(recorder.submit_tool(tool(1, false)));
        assert!(recorder.submit_tool(tool(2, true)));
        recorder.flush(Duration::from_secs(10)).await;
        assert!(!kept(&store, "req_1").await);
        assert!(kept(&store, "req_2").await);
        assert!(!kept(&store, "tool_1").await);
        assert!(kept(&store, "tool_2").await);
        let rows = store.calls_since(0, None, 100).await.unwrap();
        assert_eq!(rows.len(), 2, "both model calls' records");
        let listed = store.traces_list(&Default::default(), 100).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|summary| summary.notable));
    }

    #[test]
    fn a_trace_neither_kept_nor_exported_is_not_built_and_its_row_keeps_the_calls_trace_id() {
        let kinds = BTreeMap::new();
        let mut routine = call(1);
        let ids = rein_core::trace::TraceIds::for_call(None);
        routine.info.ids = Some(ids.clone());
        let (row, exported) = recorded(routine.clone(), &kinds, false, false);
        assert_eq!((row.trace, exported, row.trace_id.as_str()), (None, None, &*ids.trace_id));
        let (row, exported) = recorded(routine.clone(), &kinds, false, true);
        assert_eq!(row.trace, None);
        assert_eq!(exported.map(|t| t.trace_id), Some(ids.trace_id.clone()));
        let (row, exported) = recorded(routine, &kinds, true, true);
        assert_eq!(row.trace.map(|t| t.trace_id), Some(ids.trace_id.clone()));
        assert!(exported.is_some());

        // A tool call's row says what its trace would have: the rungs and the end.
        let mut info = ToolCallInfo { request_id: "t".into(), elapsed_ms: 5, ..Default::default() };
        info.notes.span("rung", rein_core::trace::SpanKind::Client, 1, 9);
        let tool = FinishedTool { at_unix_ms: 0, info, notable: false };
        let (built, _) = recorded_tool(tool.clone(), true, false);
        let (bare, _) = recorded_tool(tool, false, false);
        assert!(bare.trace.is_none());
        assert_eq!((bare.rungs, bare.elapsed_ms), (built.rungs, built.elapsed_ms));
        assert_eq!((bare.rungs, bare.elapsed_ms), (1, 9));
    }

    #[test]
    fn past_the_exporters_room_a_trace_is_counted_dropped_and_not_built() {
        let (tx, _rx) = mpsc::channel::<Trace>(2);
        let mut room = ExportRoom::now(Some(&tx));
        let counted = std::cell::Cell::new(0);
        let spans = || {
            counted.set(counted.get() + 1);
            3
        };
        assert!(room.take(spans), "room for two");
        assert!(room.take(spans));
        assert_eq!(counted.get(), 0, "a trace with room is not counted");
        assert!(!room.take(spans), "no room: not built");
        assert!(!room.take(spans));
        assert_eq!((room.unbuilt, counted.get()), (6, 2));
        let mut none = ExportRoom::now(None);
        assert!(!none.take(|| unreachable!("no exporter: nothing to count")));
        assert_eq!(none.unbuilt, 0);
    }

    /// A sink whose export never ends: the exporter holds what it took (counted), and the queue
    /// behind it has its own room only.
    struct Stuck(AtomicU64);

    #[async_trait]
    impl TraceSink for Stuck {
        async fn export(&self, traces: &[Trace]) -> Result<usize, String> {
            self.0.fetch_add(traces.len() as u64, Ordering::Relaxed);
            std::future::pending().await
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_exporter_that_cannot_keep_up_loses_spans_counted_and_every_record_lands() {
        let config = TracesConfig { batch: 64, ..config(4) };
        let sink = Arc::new(Stuck(AtomicU64::new(0)));
        let (_dir, store, recorder, _stop_tx) = started(&config, Some(sink.clone())).await;
        let mut submitted = 0;
        for round in 0..3 {
            for n in 0..4 {
                submitted += u64::from(recorder.submit(call(round * 4 + n)));
            }
            recorder.flush(Duration::from_secs(10)).await;
        }
        let stats = recorder.stats();
        let written = stats.records_written.load(Ordering::Relaxed);
        assert_eq!(written, submitted);
        assert_eq!(store.calls_since(0, None, 100).await.unwrap().len() as u64, written);
        for _ in 0..100 {
            if sink.0.load(Ordering::Relaxed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Two spans a call. Every trace is in the stuck export, in the queue (room for four) or
        // counted dropped, whether it was built or not: never more, never fewer.
        let took = sink.0.load(Ordering::Relaxed);
        let dropped = stats.spans_dropped_queue.load(Ordering::Relaxed);
        assert_eq!(dropped % 2, 0);
        let queued = written.checked_sub(took + dropped / 2).expect("no trace counted twice");
        assert!(queued <= 4, "{written} written, {took} taken, {dropped} spans dropped");
        assert!(dropped >= 2 * 4, "at least one batch found no room: {dropped}");
        assert_eq!(stats.spans_exported.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_routine_bucket_refills_by_the_calls_clock_and_never_runs_back() {
        let mut routine = RoutineTraces::new(3);
        let t0 = 10_000;
        let taken = |r: &mut RoutineTraces, at| (0..5).filter(|_| r.route("a", at)).count();
        assert_eq!(taken(&mut routine, t0), 3, "a full bucket: the burst");
        assert_eq!(taken(&mut routine, t0 - 2_000), 0, "an earlier call refills nothing");
        assert_eq!(taken(&mut routine, t0 + 1_000), 3, "a second refills the rate, no more");
        assert_eq!(taken(&mut routine, t0 + 100_000), 3, "never more than the burst");
        assert!(routine.tool("a", t0), "tools have buckets of their own");
        assert!(!RoutineTraces::new(0).route("a", t0), "0: no routine trace");
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
