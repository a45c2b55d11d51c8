//! `[traces]`: what rein keeps of finished calls and where their traces go. Every call's SLI
//! record is written to the store (for `rein sli` and `/admin/sli`) and kept for
//! `records_retention_hours`. The trace of a call not answered on the first try (notable) is
//! always written and kept for the whole `retention_hours`; a routine call's trace is written
//! while its route (or tool) has written fewer than `routine_per_second` a second, and kept while
//! it is among the newest `keep_last`. `[traces.otlp]` exports every trace over OTLP (HTTP/protobuf or gRPC), batched off the
//! request path: a call waits for neither the store nor the exporter, and what a full queue or a
//! failed export loses is counted. Header values for the collector come from the environment and
//! are secrets.

use std::collections::BTreeMap;
use std::time::Duration;

use rein_core::Secret;
use rein_core::problems::Problems;
use serde::{Deserialize, Serialize};

use super::EnvLookup;

/// `[traces]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawTraces {
    /// Record calls and keep traces at all.
    pub enabled: bool,
    /// How many of the newest traces are kept (beyond them, only notable ones).
    pub keep_last: u32,
    /// The most traces of routine calls (answered on the first try, as they were) written a
    /// second, per route or tool, with a burst of as many; `0` writes none. Notable calls'
    /// traces are always written.
    pub routine_per_second: u32,
    /// How long traces are kept.
    pub retention_hours: u32,
    /// How long calls' SLI records are kept (the longest `rein sli --window`).
    pub records_retention_hours: u32,
    /// Finished calls waiting to be written; beyond this they are dropped and counted.
    pub queue: u32,
    /// The most calls written (and spans exported) in one batch.
    pub batch: u32,
    /// How long a batch waits to fill before it is written anyway.
    pub flush_ms: u64,
    /// `service.name` of exported traces.
    pub service_name: String,
    pub otlp: Option<RawOtlp>,
}

impl Default for RawTraces {
    fn default() -> Self {
        Self {
            enabled: true,
            keep_last: 1_000,
            routine_per_second: 10,
            retention_hours: 72,
            records_retention_hours: 24 * 30,
            queue: 4_096,
            batch: 256,
            flush_ms: 1_000,
            service_name: "rein".to_string(),
            otlp: None,
        }
    }
}

/// `[traces.otlp]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawOtlp {
    /// HTTP: the traces URL (`http://collector:4318/v1/traces`); gRPC: the collector
    /// (`http://collector:4317`).
    pub endpoint: String,
    /// `http/protobuf` (default) or `grpc`.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Header name → the environment variable holding its value (an API key, say).
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    #[serde(default = "default_otlp_timeout")]
    pub timeout_ms: u64,
}

fn default_otlp_timeout() -> u64 {
    5_000
}

/// How traces leave over OTLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OtlpProtocol {
    HttpProtobuf,
    Grpc,
}

/// `[traces.otlp]`, validated.
#[derive(Debug, Clone, Serialize)]
pub struct OtlpSettings {
    pub endpoint: String,
    pub protocol: OtlpProtocol,
    /// Header values are secrets: they print as `***`.
    pub headers: Vec<(String, Secret)>,
    #[serde(rename = "timeout_ms", with = "rein_core::clock::millis")]
    pub timeout: Duration,
}

/// `[traces]`, validated.
#[derive(Debug, Clone, Serialize)]
pub struct TracesConfig {
    pub enabled: bool,
    pub keep_last: u32,
    pub routine_per_second: u32,
    #[serde(rename = "retention_ms", with = "rein_core::clock::millis")]
    pub retention: Duration,
    #[serde(rename = "records_retention_ms", with = "rein_core::clock::millis")]
    pub records_retention: Duration,
    pub queue: usize,
    pub batch: usize,
    #[serde(rename = "flush_ms", with = "rein_core::clock::millis")]
    pub flush: Duration,
    pub service_name: String,
    pub otlp: Option<OtlpSettings>,
}

impl Default for TracesConfig {
    fn default() -> Self {
        let mut problems = Problems::new();
        validate_traces(&RawTraces::default(), &|_| None, &mut problems)
    }
}

pub(super) fn validate_traces(
    raw: &RawTraces,
    env: EnvLookup<'_>,
    problems: &mut Problems,
) -> TracesConfig {
    let hours = |h: u32| Duration::from_secs(u64::from(h) * 3_600);
    if raw.queue == 0 {
        problems.add("traces.queue", "must be at least 1");
    }
    if raw.batch == 0 {
        problems.add("traces.batch", "must be at least 1");
    }
    if raw.retention_hours == 0 || raw.records_retention_hours == 0 {
        problems.add("traces.retention_hours", "retention must be at least one hour");
    }
    if raw.service_name.trim().is_empty() {
        problems.add("traces.service_name", "must not be empty");
    }
    let otlp = raw.otlp.as_ref().map(|otlp| {
        let protocol = match otlp.protocol.as_deref() {
            None | Some("http/protobuf") | Some("http") => OtlpProtocol::HttpProtobuf,
            Some("grpc") => OtlpProtocol::Grpc,
            Some(other) => {
                problems.add(
                    "traces.otlp.protocol",
                    format!("`{other}` is not `http/protobuf` or `grpc`"),
                );
                OtlpProtocol::HttpProtobuf
            }
        };
        if !(otlp.endpoint.starts_with("http://") || otlp.endpoint.starts_with("https://")) {
            problems.add(
                "traces.otlp.endpoint",
                format!("`{}` must be an http:// or https:// URL", otlp.endpoint),
            );
        }
        if protocol == OtlpProtocol::Grpc && otlp.endpoint.starts_with("https://") {
            problems.add(
                "traces.otlp.endpoint",
                "gRPC export has no TLS in this build: use `protocol = \"http/protobuf\"` for an https:// collector",
            );
        }
        if otlp.timeout_ms == 0 {
            problems.add("traces.otlp.timeout_ms", "must be at least 1");
        }
        let mut headers = Vec::new();
        for (name, var) in &otlp.headers_env {
            if axum_like_header_name(name) {
                match env(var).filter(|value| !value.is_empty()) {
                    Some(value) => headers.push((name.to_ascii_lowercase(), Secret::new(value))),
                    None => problems.add(
                        format!("traces.otlp.headers_env.{name}"),
                        format!("environment variable `{var}` is not set"),
                    ),
                }
            } else {
                problems
                    .add(format!("traces.otlp.headers_env.{name}"), "is not an HTTP header name");
            }
        }
        OtlpSettings {
            endpoint: otlp.endpoint.clone(),
            protocol,
            headers,
            timeout: Duration::from_millis(otlp.timeout_ms.max(1)),
        }
    });
    TracesConfig {
        enabled: raw.enabled,
        keep_last: raw.keep_last,
        routine_per_second: raw.routine_per_second,
        retention: hours(raw.retention_hours.max(1)),
        records_retention: hours(raw.records_retention_hours.max(1)),
        queue: raw.queue.max(1) as usize,
        batch: raw.batch.max(1) as usize,
        flush: Duration::from_millis(raw.flush_ms.max(1)),
        service_name: raw.service_name.clone(),
        otlp,
    }
}

/// An HTTP header name: one or more token characters.
fn axum_like_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}
