//! Prometheus metrics: what the engine did, counted by route, tier and outcome, and what the tool
//! dispatcher did, counted by tool and rung, rendered as Prometheus text at `/metrics`. The
//! engine reports through the [`Observer`] trait and the dispatcher through [`ToolObserver`];
//! breaker states and the outbox's depth and oldest item are read at scrape time so they are
//! never stale. `deploy/prometheus/rein-alerts.yml` alerts on these names.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rein_core::{Alert, AttemptRecord, BreakerState, CallReport, Engine, Observer};
use rein_store::tools::OutboxStats;
use rein_tools::{ReplayResult, ToolObserver, ToolStatus};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOutcome {
    route: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    route: String,
    tier: String,
    provider: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AlertLabels {
    route: String,
    tier: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProviderLabel {
    provider: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TierLabels {
    route: String,
    tier: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolCallLabels {
    tool: String,
    rung: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolRungLabels {
    tool: String,
    rung: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolResultLabels {
    tool: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolBulkheadLabels {
    tool: String,
    bulkhead: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabel {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabel {
    route: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NoVerdictLabel {
    route: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TriggerLabel {
    route: String,
    trigger: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CoverageLabel {
    route: String,
    method: String,
    verdict: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProbeLabel {
    route: String,
    question: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LabeledOutcome {
    route: String,
    label: String,
    value: String,
    outcome: String,
}

/// The most distinct values one route's label keeps as series; later ones count as `other`.
pub const MAX_LABEL_VALUES: usize = 50;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReviewLabel {
    trigger: String,
    decision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabel {
    route: String,
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    api: String,
    status: String,
}

fn quality_histogram() -> Histogram {
    Histogram::new([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 20.0, 30.0,
    ])
}

/// Every metric the gateway exports.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RouteOutcome, Counter>,
    latency: Family<RouteOutcome, Histogram, fn() -> Histogram>,
    attempts: Family<AttemptLabels, Counter>,
    alerts: Family<AlertLabels, Counter>,
    budget_exhausted: Family<ProviderLabel, Counter>,
    breaker: Family<TierLabels, Gauge>,
    http_errors: Family<HttpLabels, Counter>,
    tool_calls: Family<ToolCallLabels, Counter>,
    fallback_served: Family<ToolRungLabels, Counter>,
    gate_holds: Family<ToolLabel, Counter>,
    replays: Family<ToolResultLabels, Counter>,
    tool_busy: Family<ToolBulkheadLabels, Counter>,
    outbox_depth: Gauge,
    outbox_failed: Gauge,
    outbox_review: Gauge,
    outbox_oldest_age: Gauge,
    calls_abandoned: Family<RouteLabel, Counter>,
    connections_open: Gauge,
    connections_closed: Family<ReasonLabel, Counter>,
    run_stops: Family<StatusLabel, Counter>,
    escalations: Family<TriggerLabel, Counter>,
    coverage_checks: Family<CoverageLabel, Counter>,
    probe_checks: Family<ProbeLabel, Counter>,
    probe_score: Family<RouteLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    probe_runs: Counter,
    probe_last_run: Gauge,
    degraded_acted: Family<RuleLabel, Counter>,
    handoff_reviews: Family<ReviewLabel, Counter>,
    kill_diversions: Family<RouteLabel, Counter>,
    labeled: Family<LabeledOutcome, Counter>,
    sli_calls: Family<RouteLabel, Counter>,
    sli_unavailable: Family<RouteLabel, Counter>,
    sli_answered: Family<RouteLabel, Counter>,
    sli_invalid_first_try: Family<RouteLabel, Counter>,
    sli_fallback_beyond_plan: Family<RouteLabel, Counter>,
    sli_degraded: Family<RouteLabel, Counter>,
    quality_score: Family<RouteLabel, Histogram, fn() -> Histogram>,
    judge_verdicts: Family<VerdictLabel, Counter>,
    judge_no_verdict: Family<NoVerdictLabel, Counter>,
    spans_exported: Counter,
    spans_dropped: Family<ReasonLabel, Counter>,
    records_dropped: Counter,
    log_lines_dropped: Counter,
    /// Per (route, label key): the values that have a series of their own.
    label_values: std::sync::Mutex<
        std::collections::HashMap<(String, String), std::collections::HashSet<String>>,
    >,
    /// The first rung's source per tool: a call served by any other rung is a fallback.
    primaries: std::sync::RwLock<std::collections::HashMap<String, String>>,
    /// Each route's series that every model call touches.
    hot: HotRoutes,
}

/// The most routes whose series [`HotRoutes`] keeps handles on; a call on any other route
/// finds its series in the families, as every call did before.
const MAX_HOT_ROUTES: usize = 1024;

/// The most (tier, provider, result) series of attempts a route keeps handles on.
const MAX_HOT_ATTEMPTS: usize = 64;

/// Handles on the series every model call touches (its request count and latency by outcome,
/// its attempts, its SLI counts), by route. prometheus-client finds a series by hashing its
/// labels into the family's map (SipHash, a byte at a time) at every `get_or_create`, and each
/// call built its labels as owned strings to ask: five families and seven strings a call, ~2k
/// instructions. A handle is the series itself (a counter or histogram shares its value with
/// its clones), taken from the family the first time the call needs it, so a series still
/// appears only once something counted in it.
#[derive(Debug, Default)]
struct HotRoutes {
    routes: std::sync::RwLock<
        std::collections::HashMap<String, Arc<RouteSeries>, foldhash::fast::RandomState>,
    >,
}

impl HotRoutes {
    /// `route`'s handles: kept ones, else new ones kept from now on (or, past
    /// [`MAX_HOT_ROUTES`] routes, new ones for this call alone).
    fn route(&self, route: &str) -> Arc<RouteSeries> {
        let routes = self.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(series) = routes.get(route) {
            return series.clone();
        }
        drop(routes);
        let mut routes = self.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(series) = routes.get(route) {
            return series.clone();
        }
        let series = Arc::new(RouteSeries::default());
        if routes.len() < MAX_HOT_ROUTES {
            routes.insert(route.to_string(), series.clone());
        }
        series
    }
}

/// One route's handles, each set the first time a call counts in it.
#[derive(Debug, Default)]
struct RouteSeries {
    /// Requests and latency, by [`outcome_index`].
    outcomes: [std::sync::OnceLock<(Counter, Histogram)>; 8],
    attempts: std::sync::Mutex<Vec<(AttemptLabels, Counter)>>,
    sli_calls: std::sync::OnceLock<Counter>,
    sli_unavailable: std::sync::OnceLock<Counter>,
    sli_answered: std::sync::OnceLock<Counter>,
    sli_invalid_first_try: std::sync::OnceLock<Counter>,
    sli_fallback_beyond_plan: std::sync::OnceLock<Counter>,
    sli_degraded: std::sync::OnceLock<Counter>,
}

/// Where [`RouteSeries::outcomes`] keeps an outcome's series.
fn outcome_index(outcome: rein_core::Outcome) -> usize {
    use rein_core::Outcome;
    match outcome {
        Outcome::Answered => 0,
        Outcome::Fallback => 1,
        Outcome::Degraded => 2,
        Outcome::Stopped => 3,
        Outcome::Interrupted => 4,
        Outcome::Declined => 5,
        Outcome::HandedOff => 6,
        Outcome::Clarified => 7,
    }
}

/// Count one in `cell`'s counter, taken from `family` (for `route`) the first time.
fn count_in(
    cell: &std::sync::OnceLock<Counter>,
    family: &Family<RouteLabel, Counter>,
    route: &str,
) {
    cell.get_or_init(|| family.get_or_create(&RouteLabel { route: route.to_string() }).clone())
        .inc();
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("rein");
        let requests = Family::<RouteOutcome, Counter>::default();
        registry.register("requests", "Model calls by route and outcome", requests.clone());
        let latency = Family::<RouteOutcome, Histogram, fn() -> Histogram>::new_with_constructor(
            latency_histogram as fn() -> Histogram,
        );
        registry.register_with_unit(
            "request_duration",
            "Time from request to the whole answer, by route and outcome",
            prometheus_client::registry::Unit::Seconds,
            latency.clone(),
        );
        let attempts = Family::<AttemptLabels, Counter>::default();
        registry.register(
            "attempts",
            "Upstream attempts by tier and result (ok or the failure kind)",
            attempts.clone(),
        );
        let alerts = Family::<AlertLabels, Counter>::default();
        registry.register("alerts", "Tiers skipped for a permanent failure", alerts.clone());
        let budget_exhausted = Family::<ProviderLabel, Counter>::default();
        registry.register(
            "retry_budget_exhausted",
            "Retries refused because the provider's retry budget was spent",
            budget_exhausted.clone(),
        );
        let breaker = Family::<TierLabels, Gauge>::default();
        registry.register(
            "tier_breaker_state",
            "Cooldown state of each tier: 0 closed, 1 half-open, 2 open",
            breaker.clone(),
        );
        let http_errors = Family::<HttpLabels, Counter>::default();
        registry.register(
            "http_errors",
            "Requests refused by the gateway before reaching the engine, by API and status",
            http_errors.clone(),
        );
        let tool_calls = Family::<ToolCallLabels, Counter>::default();
        registry.register(
            "tool_calls",
            "Tool calls by tool, the rung that served or refused them (its source), and status",
            tool_calls.clone(),
        );
        let fallback_served = Family::<ToolRungLabels, Counter>::default();
        registry.register(
            "fallback_served",
            "Tool calls answered by a rung other than the tool's primary, by tool and rung",
            fallback_served.clone(),
        );
        let gate_holds = Family::<ToolLabel, Counter>::default();
        registry.register(
            "tool_gate_holds",
            "Writes a gate held for approval, by tool",
            gate_holds.clone(),
        );
        let replays = Family::<ToolResultLabels, Counter>::default();
        registry.register(
            "outbox_replays",
            "Replays of queued writes by tool and result (done, retry, failed)",
            replays.clone(),
        );
        let tool_busy = Family::<ToolBulkheadLabels, Counter>::default();
        registry.register(
            "tool_busy",
            "Tool calls answered busy because their bulkhead was full",
            tool_busy.clone(),
        );
        let outbox_depth = Gauge::default();
        registry.register("outbox_depth", "Queued writes waiting to replay", outbox_depth.clone());
        let outbox_failed = Gauge::default();
        registry.register(
            "outbox_failed",
            "Queued writes the primary refused for good, waiting for an operator",
            outbox_failed.clone(),
        );
        let outbox_review = Gauge::default();
        registry.register(
            "outbox_review",
            "Writes whose outcome is unknown, held for a person (idempotency = \"none\")",
            outbox_review.clone(),
        );
        let outbox_oldest_age = Gauge::default();
        registry.register_with_unit(
            "outbox_oldest_age",
            "Age of the oldest queued write (0 when the queue is empty)",
            prometheus_client::registry::Unit::Seconds,
            outbox_oldest_age.clone(),
        );
        let calls_abandoned = Family::<RouteLabel, Counter>::default();
        registry.register(
            "calls_abandoned",
            "Model calls whose client went away before the answer was complete (cancelled upstream)",
            calls_abandoned.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "connections_open",
            "Client connections open now",
            connections_open.clone(),
        );
        let connections_closed = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "connections_closed",
            "Client connections rein closed itself, by reason (header_timeout, idle_timeout, write_stall, limit, tls_handshake)",
            connections_closed.clone(),
        );
        let run_stops = Family::<StatusLabel, Counter>::default();
        registry.register(
            "run_stops",
            "Agent runs stopped by a stop condition, by status (stopped_max_model_calls, stopped_repeated_call, stopped_repeated_error, stopped_deadline, stopped_spend)",
            run_stops.clone(),
        );
        let escalations = Family::<TriggerLabel, Counter>::default();
        registry.register(
            "escalations",
            "Conversations sent to a person, by route and trigger (handoff_rule, coverage, checks_failed, stop_condition, gate, degraded)",
            escalations.clone(),
        );
        let coverage_checks = Family::<CoverageLabel, Counter>::default();
        registry.register(
            "coverage_checks",
            "Coverage checks, by route, method (logprobs, samples, error) and verdict (covered, not_covered, error)",
            coverage_checks.clone(),
        );
        let probe_checks = Family::<ProbeLabel, Counter>::default();
        registry.register(
            "probe_checks",
            "Golden-prompt probe answers, by route, question and result (pass, fail, error)",
            probe_checks.clone(),
        );
        let probe_score = Family::<RouteLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "probe_score",
            "The share of the golden-prompt probe's questions of a route its last run passed",
            probe_score.clone(),
        );
        let probe_runs = Counter::default();
        registry.register("probe_runs", "Runs of the golden-prompt probe", probe_runs.clone());
        let probe_last_run = Gauge::default();
        registry.register(
            "probe_last_run_timestamp_seconds",
            "When the golden-prompt probe last ran, in Unix seconds",
            probe_last_run.clone(),
        );
        let degraded_acted = Family::<RuleLabel, Counter>::default();
        registry.register(
            "degraded_acted",
            "Degraded replies made by a degraded rule acting without a model, by route and rule",
            degraded_acted.clone(),
        );
        let kill_diversions = Family::<RouteLabel, Counter>::default();
        registry.register(
            "kill_switch_diversions",
            "Calls the kill switch sent to the degraded mode instead of a model, by route",
            kill_diversions.clone(),
        );
        let labeled = Family::<LabeledOutcome, Counter>::default();
        registry.register(
            "labeled_calls",
            "Calls by route, by each label key the route slices by (`[routes.<name>] labels`) and its value (the first 50 values of a key, then `other`), and by outcome",
            labeled.clone(),
        );
        let handoff_reviews = Family::<ReviewLabel, Counter>::default();
        registry.register(
            "handoff_reviews",
            "Reviewers' decisions on hand-off drafts, by trigger and decision (approve, edit, reject)",
            handoff_reviews.clone(),
        );
        let sli_calls = Family::<RouteLabel, Counter>::default();
        registry.register(
            "sli_calls",
            "Model calls the SLIs count, by route (the denominator of the rein_sli_* ratios)",
            sli_calls.clone(),
        );
        let sli_unavailable = Family::<RouteLabel, Counter>::default();
        registry.register(
            "sli_unavailable",
            "Calls without a usable answer inside their deadline (an error, a timeout, a degraded reply, a cut stream); a clean hand-off or a clarifying question is available",
            sli_unavailable.clone(),
        );
        let sli_answered = Family::<RouteLabel, Counter>::default();
        registry.register("sli_answered", "Calls a model answered, by route", sli_answered.clone());
        let sli_invalid_first_try = Family::<RouteLabel, Counter>::default();
        registry.register(
            "sli_invalid_first_try",
            "Answered calls whose first answer needed a repair or a re-ask, by route",
            sli_invalid_first_try.clone(),
        );
        let sli_fallback_beyond_plan = Family::<RouteLabel, Counter>::default();
        registry.register(
            "sli_fallback_beyond_plan",
            "Calls a fallback tier served because an earlier tier failed (the planned failover share not counted), by route",
            sli_fallback_beyond_plan.clone(),
        );
        let sli_degraded = Family::<RouteLabel, Counter>::default();
        registry.register(
            "sli_degraded",
            "Calls answered with the degraded reply, by route",
            sli_degraded.clone(),
        );
        let quality_score =
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                quality_histogram as fn() -> Histogram,
            );
        registry.register(
            "quality_score",
            "The online judge's score (0 to 1) of sampled answers, by route",
            quality_score.clone(),
        );
        let judge_verdicts = Family::<VerdictLabel, Counter>::default();
        registry.register(
            "judge_verdicts",
            "The online judge's verdicts on sampled answers (pass, fail), by route; a slice judged at a higher share counts here too",
            judge_verdicts.clone(),
        );
        let judge_no_verdict = Family::<NoVerdictLabel, Counter>::default();
        registry.register(
            "judge_no_verdict",
            "Sampled answers the online judge gave no verdict on, by route and reason (queue_full, judge_failed, unreadable, store_failed)",
            judge_no_verdict.clone(),
        );
        let spans_exported = Counter::default();
        registry.register(
            "trace_spans_exported",
            "Spans sent to the OTLP collector",
            spans_exported.clone(),
        );
        let spans_dropped = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "trace_spans_dropped",
            "Spans not exported, by reason (queue_full: the exporter fell behind; export_failed: the collector was down, slow or refused)",
            spans_dropped.clone(),
        );
        let records_dropped = Counter::default();
        registry.register(
            "call_records_dropped",
            "Finished calls whose record and trace were not stored (the recorder's queue was full, or the store refused the write)",
            records_dropped.clone(),
        );
        let log_lines_dropped = Counter::default();
        registry.register(
            "log_lines_dropped",
            "Log lines not written because whatever reads rein's stderr fell behind (the log writer's queue was full)",
            log_lines_dropped.clone(),
        );
        Self {
            registry,
            requests,
            latency,
            attempts,
            alerts,
            budget_exhausted,
            breaker,
            http_errors,
            tool_calls,
            fallback_served,
            gate_holds,
            replays,
            tool_busy,
            outbox_depth,
            outbox_failed,
            outbox_review,
            outbox_oldest_age,
            calls_abandoned,
            connections_open,
            connections_closed,
            run_stops,
            escalations,
            coverage_checks,
            probe_checks,
            probe_score,
            probe_runs,
            probe_last_run,
            degraded_acted,
            handoff_reviews,
            kill_diversions,
            labeled,
            sli_calls,
            sli_unavailable,
            sli_answered,
            sli_invalid_first_try,
            sli_fallback_beyond_plan,
            sli_degraded,
            quality_score,
            judge_verdicts,
            judge_no_verdict,
            spans_exported,
            spans_dropped,
            records_dropped,
            log_lines_dropped,
            label_values: Default::default(),
            primaries: Default::default(),
            hot: HotRoutes::default(),
        }
    }

    /// Remember each tool's primary rung (its first rung's source), for `fallback_served`.
    pub fn set_tool_primaries(&self, primaries: impl IntoIterator<Item = (String, String)>) {
        let mut map = match self.primaries.write() {
            Ok(map) => map,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.clear();
        map.extend(primaries);
    }

    /// Set the outbox gauges from the store's numbers, read now.
    pub fn set_outbox(&self, stats: &OutboxStats, now_unix_ms: i64) {
        self.outbox_depth.set(stats.pending);
        self.outbox_failed.set(stats.failed);
        self.outbox_review.set(stats.review);
        let age_s = stats
            .oldest_pending_created_unix_ms
            .map_or(0, |created| (now_unix_ms - created).max(0) / 1000);
        self.outbox_oldest_age.set(age_s);
    }

    /// Count a finished call for the SLIs, by the spec's definitions (`rein_core::sli`).
    pub fn sli(&self, record: &rein_core::sli::CallRecord) {
        let route = record.route.as_str();
        let hot = self.hot.route(route);
        count_in(&hot.sli_calls, &self.sli_calls, route);
        if !record.available() {
            count_in(&hot.sli_unavailable, &self.sli_unavailable, route);
        }
        if record.answered() {
            count_in(&hot.sli_answered, &self.sli_answered, route);
            if record.repaired {
                count_in(&hot.sli_invalid_first_try, &self.sli_invalid_first_try, route);
            }
        }
        if record.fallback_beyond_plan() {
            count_in(&hot.sli_fallback_beyond_plan, &self.sli_fallback_beyond_plan, route);
        }
        if record.outcome == rein_core::Outcome::Degraded {
            count_in(&hot.sli_degraded, &self.sli_degraded, route);
        }
        if let Some(score) = record.quality {
            self.quality_score
                .get_or_create(&RouteLabel { route: route.to_string() })
                .observe(score);
        }
    }

    /// A verdict of the online judge. Only answers drawn inside the route's own share feed
    /// `rein_quality_score`, so a slice judged at 100 % while someone investigates it does not
    /// pull the route's score (its verdicts are in `rein_judge_verdicts_total` and the store).
    pub fn judged(&self, verdict: &rein_store::calls::Verdict) {
        let verdict_label = if verdict.pass { "pass" } else { "fail" };
        let label = VerdictLabel { route: verdict.route.clone(), verdict: verdict_label.into() };
        self.judge_verdicts.get_or_create(&label).inc();
        if verdict.base {
            let route = RouteLabel { route: verdict.route.clone() };
            self.quality_score.get_or_create(&route).observe(verdict.score);
        }
    }

    /// A sampled answer the online judge gave no verdict on.
    pub fn no_verdict(&self, route: &str, why: rein_runtime::online_judge::NoVerdict) {
        let label = NoVerdictLabel { route: route.to_string(), reason: why.as_str().to_string() };
        self.judge_no_verdict.get_or_create(&label).inc();
    }

    /// Set the recorder's counters from its numbers, read now.
    pub fn set_recorder(&self, stats: &rein_runtime::recorder::RecorderStats) {
        use std::sync::atomic::Ordering::Relaxed;
        set_counter(&self.spans_exported, stats.spans_exported.load(Relaxed));
        let reason = |name: &str| ReasonLabel { reason: name.to_string() };
        set_counter(
            &self.spans_dropped.get_or_create(&reason("queue_full")),
            stats.spans_dropped_queue.load(Relaxed),
        );
        set_counter(
            &self.spans_dropped.get_or_create(&reason("export_failed")),
            stats.spans_dropped_export.load(Relaxed),
        );
        set_counter(&self.records_dropped, stats.records_dropped.load(Relaxed));
    }

    /// Set the log writer's count of dropped lines, read now (none when nothing counts them).
    pub fn set_log_writer(&self) {
        if let Some(dropped) = LOG_LINES_DROPPED.get() {
            set_counter(&self.log_lines_dropped, dropped());
        }
    }

    /// Count a model call on `route` whose client went away before its answer was complete.
    pub fn call_abandoned(&self, route: &str) {
        self.calls_abandoned.get_or_create(&RouteLabel { route: route.to_string() }).inc();
    }

    /// Count a run a stop condition stopped, by its status.
    pub fn run_stopped(&self, status: &str) {
        self.run_stops.get_or_create(&StatusLabel { status: status.to_string() }).inc();
    }

    /// Count a conversation sent to a person, by what triggered it.
    pub fn escalated(&self, route: &str, trigger: &str) {
        let label = TriggerLabel { route: route.to_string(), trigger: trigger.to_string() };
        self.escalations.get_or_create(&label).inc();
    }

    /// Count a coverage check's verdict.
    pub fn coverage_checked(&self, route: &str, method: &str, verdict: &str) {
        let label = CoverageLabel {
            route: route.to_string(),
            method: method.to_string(),
            verdict: verdict.to_string(),
        };
        self.coverage_checks.get_or_create(&label).inc();
    }

    /// One run of the golden-prompt probe: each question's result (`pass`, `fail`, `error`) by
    /// route and question, and per route the share that passed.
    pub fn probe_ran<'a>(
        &self,
        results: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
        now_unix_s: i64,
    ) {
        let mut per_route: std::collections::BTreeMap<&str, (u32, u32)> = Default::default();
        for (route, question, result) in results {
            let label = ProbeLabel {
                route: route.to_string(),
                question: question.to_string(),
                result: result.to_string(),
            };
            self.probe_checks.get_or_create(&label).inc();
            let counts = per_route.entry(route).or_default();
            counts.0 += u32::from(result == "pass");
            counts.1 += 1;
        }
        for (route, (passed, asked)) in per_route {
            let score = f64::from(passed) / f64::from(asked.max(1));
            self.probe_score.get_or_create(&RouteLabel { route: route.to_string() }).set(score);
        }
        self.probe_runs.inc();
        self.probe_last_run.set(now_unix_s);
    }

    /// Count a call in each slice its labels put it in.
    fn labeled_call(&self, report: &CallReport) {
        let mut values = match self.label_values.lock() {
            Ok(values) => values,
            Err(poisoned) => poisoned.into_inner(),
        };
        for (key, value) in &report.labels {
            let seen = values.entry((report.route.clone(), key.clone())).or_default();
            let value = if seen.contains(value) {
                value.clone()
            } else if seen.len() < MAX_LABEL_VALUES {
                seen.insert(value.clone());
                value.clone()
            } else {
                "other".to_string()
            };
            let label = LabeledOutcome {
                route: report.route.clone(),
                label: key.clone(),
                value,
                outcome: report.outcome.as_str().to_string(),
            };
            self.labeled.get_or_create(&label).inc();
        }
    }

    /// Count a reviewer's decision on a hand-off's draft.
    pub fn handoff_reviewed(&self, trigger: &str, decision: &str) {
        let label = ReviewLabel { trigger: trigger.to_string(), decision: decision.to_string() };
        self.handoff_reviews.get_or_create(&label).inc();
    }

    /// Count a degraded reply a rule made without a model.
    pub fn degraded_rule_acted(&self, route: &str, rule: &str) {
        let label = RuleLabel { route: route.to_string(), rule: rule.to_string() };
        self.degraded_acted.get_or_create(&label).inc();
    }

    /// A client connection opened (+1) or closed (-1).
    pub fn connection_open(&self, delta: i64) {
        self.connections_open.inc_by(delta);
    }

    /// Count a client connection rein closed itself, by why.
    pub fn connection_closed(&self, reason: &str) {
        self.connections_closed.get_or_create(&ReasonLabel { reason: reason.to_string() }).inc();
    }

    /// Count a request the gateway refused (auth, bad input) by API and status.
    pub fn http_error(&self, api: &str, status: u16) {
        self.http_errors
            .get_or_create(&HttpLabels { api: api.to_string(), status: status.to_string() })
            .inc();
    }

    /// Render the Prometheus text exposition, with breaker states read from `engine` now.
    pub fn render(&self, engine: &Engine) -> String {
        for tier in engine.tier_states() {
            let value = match tier.state {
                BreakerState::Closed => 0,
                BreakerState::HalfOpen => 1,
                BreakerState::Open => 2,
            };
            self.breaker
                .get_or_create(&TierLabels { route: tier.route, tier: tier.tier })
                .set(value);
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            return "# metrics encoding failed\n".to_string();
        }
        out
    }
}

/// The engine's observer, feeding [`Metrics`].
#[derive(Debug, Clone)]
pub struct MetricsObserver(pub Arc<Metrics>);

impl Observer for MetricsObserver {
    fn on_attempt(&self, route: &str, attempt: &AttemptRecord) {
        let result = attempt.classified.as_ref().map_or("ok", |c| c.kind.as_str());
        let hot = self.0.hot.route(route);
        let mut attempts = hot.attempts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = attempts.iter().find(|(labels, _)| {
            labels.result == result
                && labels.tier == attempt.tier_name
                && labels.provider == attempt.provider
        });
        if let Some((_, counter)) = known {
            counter.inc();
            return;
        }
        let labels = AttemptLabels {
            route: route.to_string(),
            tier: attempt.tier_name.clone(),
            provider: attempt.provider.clone(),
            result: result.to_string(),
        };
        let counter = self.0.attempts.get_or_create(&labels).clone();
        counter.inc();
        if attempts.len() < MAX_HOT_ATTEMPTS {
            attempts.push((labels, counter));
        }
    }

    fn on_alert(&self, alert: &Alert) {
        self.0
            .alerts
            .get_or_create(&AlertLabels {
                route: alert.route.clone(),
                tier: alert.tier_name.clone(),
                kind: alert.kind.to_string(),
            })
            .inc();
    }

    fn on_call(&self, report: &CallReport) {
        let hot = self.0.hot.route(&report.route);
        let (requests, latency) = hot.outcomes[outcome_index(report.outcome)].get_or_init(|| {
            let labels = RouteOutcome {
                route: report.route.clone(),
                outcome: report.outcome.as_str().to_string(),
            };
            let requests = self.0.requests.get_or_create(&labels).clone();
            (requests, self.0.latency.get_or_create(&labels).clone())
        });
        requests.inc();
        latency.observe(report.elapsed_ms as f64 / 1000.0);
        if !report.labels.is_empty() {
            self.0.labeled_call(report);
        }
        for step in &report.steps {
            match step {
                rein_core::Step::DegradedActed { rule, handoff } => {
                    self.0.degraded_rule_acted(&report.route, rule);
                    if *handoff {
                        let trigger = rein_core::handoff::Trigger::Degraded;
                        self.0.escalated(&report.route, trigger.as_str());
                    }
                }
                rein_core::Step::KillSwitch { reason } => {
                    let route = RouteLabel { route: report.route.clone() };
                    self.0.kill_diversions.get_or_create(&route).inc();
                    tracing::warn!(route = %report.route, reason = %reason, "kill switch diverted a call to the degraded mode");
                }
                _ => {}
            }
        }
    }

    fn on_retry_budget_exhausted(&self, provider: &str) {
        self.0
            .budget_exhausted
            .get_or_create(&ProviderLabel { provider: provider.to_string() })
            .inc();
    }
}

/// The tool dispatcher's observer, feeding [`Metrics`].
#[derive(Debug, Clone)]
pub struct ToolMetricsObserver(pub Arc<Metrics>);

impl ToolObserver for ToolMetricsObserver {
    fn configured(&self, primaries: &[(String, String)]) {
        self.0.set_tool_primaries(primaries.iter().cloned());
    }

    fn served(&self, tool: &str, source: &str, status: ToolStatus) {
        let metrics = &self.0;
        metrics
            .tool_calls
            .get_or_create(&ToolCallLabels {
                tool: tool.to_string(),
                rung: source.to_string(),
                status: status.as_str().to_string(),
            })
            .inc();
        let primary = {
            let map = match metrics.primaries.read() {
                Ok(map) => map,
                Err(poisoned) => poisoned.into_inner(),
            };
            map.get(tool).is_some_and(|primary| primary == source)
        };
        if !primary && source != rein_tools::LADDER_EXHAUSTED {
            metrics
                .fallback_served
                .get_or_create(&ToolRungLabels { tool: tool.to_string(), rung: source.to_string() })
                .inc();
        }
    }

    fn gate_held(&self, tool: &str) {
        self.0.gate_holds.get_or_create(&ToolLabel { tool: tool.to_string() }).inc();
    }

    fn replayed(&self, tool: &str, result: ReplayResult) {
        self.0
            .replays
            .get_or_create(&ToolResultLabels {
                tool: tool.to_string(),
                result: result.as_str().to_string(),
            })
            .inc();
    }

    fn busy(&self, tool: &str, bulkhead: &str) {
        self.0
            .tool_busy
            .get_or_create(&ToolBulkheadLabels {
                tool: tool.to_string(),
                bulkhead: bulkhead.to_string(),
            })
            .inc();
    }
}

/// Bring a counter up to `total`, a count kept elsewhere (counters only go up).
/// How many log lines the process's log writer dropped, when it drops any: the writer, like the
/// log subscriber, is the process's, installed once by the binary before a gateway starts.
static LOG_LINES_DROPPED: std::sync::OnceLock<Box<dyn Fn() -> u64 + Send + Sync>> =
    std::sync::OnceLock::new();

/// Have `/metrics` read the log writer's dropped lines from `dropped` (the first call wins).
pub fn count_dropped_log_lines(dropped: impl Fn() -> u64 + Send + Sync + 'static) {
    let _ = LOG_LINES_DROPPED.set(Box::new(dropped));
}

fn set_counter(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

/// The online judge's verdicts, counted in the gateway's metrics.
#[derive(Debug, Clone)]
pub struct VerdictMetrics(pub Arc<Metrics>);

impl rein_runtime::online_judge::VerdictObserver for VerdictMetrics {
    fn judged(&self, verdict: &rein_store::calls::Verdict) {
        self.0.judged(verdict);
    }

    fn no_verdict(&self, route: &str, why: rein_runtime::online_judge::NoVerdict) {
        self.0.no_verdict(route, why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::Outcome;

    fn report(route: &str, outcome: Outcome) -> CallReport {
        CallReport {
            route: route.to_string(),
            settings_version: None,
            outcome,
            served_by: None,
            steps: Vec::new(),
            alerts: Vec::new(),
            elapsed_ms: 40,
            rejected_draft: None,
            labels: Default::default(),
        }
    }

    fn attempt(tier: &str, provider: &str) -> AttemptRecord {
        AttemptRecord {
            tier: 0,
            tier_name: tier.to_string(),
            provider: provider.to_string(),
            model: "m".to_string(),
            number: 1,
            started_ms: 0,
            elapsed_ms: 40,
            failure: None,
            classified: None,
            probe: false,
        }
    }

    fn record(route: &str, outcome: Outcome) -> rein_core::sli::CallRecord {
        rein_core::sli::CallRecord {
            route: route.to_string(),
            tier: Some("primary".to_string()),
            labels: Default::default(),
            outcome,
            failover: false,
            attempts: 1,
            repaired: false,
            elapsed_ms: 40,
            first_token_ms: None,
            deadline_ms: 20_000,
            escalation: None,
            covered: None,
            quality: None,
            quality_probability: None,
        }
    }

    /// The value of the series `series` (its name and labels, as rendered) in `text`.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    fn render(metrics: &Metrics) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &metrics.registry).unwrap();
        out
    }

    /// A route's calls count in the series their outcome, attempt and SLIs name, through the
    /// kept handles as through the families; a series nothing counted in is not there.
    #[test]
    fn a_routes_calls_count_in_their_own_series() {
        let metrics = Arc::new(Metrics::new());
        let observer = MetricsObserver(metrics.clone());
        for (route, outcome) in [
            ("support", Outcome::Answered),
            ("support", Outcome::Answered),
            ("support", Outcome::Degraded),
            ("billing", Outcome::Answered),
        ] {
            observer.on_attempt(route, &attempt("primary", "openai"));
            observer.on_call(&report(route, outcome));
            metrics.sli(&record(route, outcome));
        }
        observer.on_attempt("support", &attempt("backup", "anthropic"));
        observer.on_attempt("support", &attempt("primary", "azure"));
        let cut = rein_core::classify::classify(&rein_core::Failure::StreamCut);
        let result = cut.kind.as_str();
        observer.on_attempt(
            "support",
            &AttemptRecord { classified: Some(cut), ..attempt("primary", "openai") },
        );
        let text = render(&metrics);
        let value = |series: &str| sample(&text, series);
        assert_eq!(value(r#"rein_requests_total{route="support",outcome="answered"}"#), Some(2.0));
        assert_eq!(value(r#"rein_requests_total{route="support",outcome="degraded"}"#), Some(1.0));
        assert_eq!(value(r#"rein_requests_total{route="billing",outcome="answered"}"#), Some(1.0));
        assert_eq!(
            value(r#"rein_request_duration_seconds_count{route="support",outcome="answered"}"#),
            Some(2.0)
        );
        let attempts = |tier: &str, provider: &str| {
            value(&format!(
                r#"rein_attempts_total{{route="support",tier="{tier}",provider="{provider}",result="ok"}}"#
            ))
        };
        let azure = attempts("primary", "azure");
        let failed = format!(
            r#"rein_attempts_total{{route="support",tier="primary",provider="openai",result="{result}"}}"#
        );
        assert_eq!(value(&failed), Some(1.0), "{text}");
        assert_eq!(
            (attempts("primary", "openai"), attempts("backup", "anthropic"), azure),
            (Some(3.0), Some(1.0), Some(1.0))
        );
        assert_eq!(value(r#"rein_sli_calls_total{route="support"}"#), Some(3.0));
        assert_eq!(value(r#"rein_sli_answered_total{route="support"}"#), Some(2.0));
        assert_eq!(value(r#"rein_sli_degraded_total{route="support"}"#), Some(1.0));
        assert_eq!(value(r#"rein_sli_calls_total{route="billing"}"#), Some(1.0));
        assert!(!text.contains(r#"rein_sli_degraded_total{route="billing"}"#), "{text}");
        assert_eq!(value(r#"rein_sli_unavailable_total{route="support"}"#), Some(1.0), "degraded");
        assert!(!text.contains(r#"rein_sli_unavailable_total{route="billing"}"#), "{text}");
    }

    /// Past the routes (and a route's attempt series) kept, calls still count, each finding
    /// its series in the family.
    #[test]
    fn calls_past_the_kept_handles_still_count() {
        let metrics = Arc::new(Metrics::new());
        let observer = MetricsObserver(metrics.clone());
        for n in 0..MAX_HOT_ROUTES + 2 {
            metrics.sli(&record(&format!("r{n}"), Outcome::Answered));
        }
        let last = format!("r{}", MAX_HOT_ROUTES + 1);
        for _ in 0..2 {
            observer.on_call(&report(&last, Outcome::Answered));
            metrics.sli(&record(&last, Outcome::Answered));
        }
        let text = render(&metrics);
        assert_eq!(sample(&text, &format!(r#"rein_sli_calls_total{{route="{last}"}}"#)), Some(3.0));
        let requests = format!(r#"rein_requests_total{{route="{last}",outcome="answered"}}"#);
        assert_eq!(sample(&text, &requests), Some(2.0));
        assert_eq!(metrics.hot.routes.read().unwrap().len(), MAX_HOT_ROUTES);

        // A kept route, past the attempt series it keeps.
        let metrics = Arc::new(Metrics::new());
        let observer = MetricsObserver(metrics.clone());
        for n in 0..MAX_HOT_ATTEMPTS + 2 {
            observer.on_attempt("support", &attempt("primary", &format!("p{n}")));
        }
        let provider = format!("p{}", MAX_HOT_ATTEMPTS + 1);
        observer.on_attempt("support", &attempt("primary", &provider));
        observer.on_attempt("support", &attempt("primary", "p0"));
        let text = render(&metrics);
        let attempts = |provider: &str| {
            sample(
                &text,
                &format!(
                    r#"rein_attempts_total{{route="support",tier="primary",provider="{provider}",result="ok"}}"#
                ),
            )
        };
        assert_eq!(
            (attempts(&provider), attempts("p0"), attempts("p1")),
            (Some(2.0), Some(2.0), Some(1.0))
        );
        let kept = metrics.hot.route("support").attempts.lock().unwrap().len();
        assert_eq!(kept, MAX_HOT_ATTEMPTS);
    }
}
