//! Prometheus metrics: what the engine did, counted by route, tier and outcome, and rendered as
//! Prometheus text at `/metrics`. The engine reports through the [`Observer`] trait; breaker
//! states are read from the engine at scrape time so they are never stale.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rein_core::{Alert, AttemptRecord, BreakerState, CallReport, Engine, Observer};

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
struct HttpLabels {
    api: String,
    status: String,
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
        Self {
            registry,
            requests,
            latency,
            attempts,
            alerts,
            budget_exhausted,
            breaker,
            http_errors,
        }
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
        self.0
            .attempts
            .get_or_create(&AttemptLabels {
                route: route.to_string(),
                tier: attempt.tier_name.clone(),
                provider: attempt.provider.clone(),
                result: result.to_string(),
            })
            .inc();
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
        let labels = RouteOutcome {
            route: report.route.clone(),
            outcome: report.outcome.as_str().to_string(),
        };
        self.0.requests.get_or_create(&labels).inc();
        self.0.latency.get_or_create(&labels).observe(report.elapsed_ms as f64 / 1000.0);
    }

    fn on_retry_budget_exhausted(&self, provider: &str) {
        self.0
            .budget_exhausted
            .get_or_create(&ProviderLabel { provider: provider.to_string() })
            .inc();
    }
}
