//! rein's traces over OTLP. [`span_data`] turns a [`Trace`] into the OpenTelemetry SDK's
//! [`SpanData`] (its own trace and span ids, the caller's span as the root's remote parent, the
//! times the report recorded, attributes, events, error status), and [`OtlpExporter`] sends
//! batches of them with the official `opentelemetry-otlp` exporter, over HTTP/protobuf or gRPC,
//! without the SDK's tracer provider or batch processor: the caller owns the queue and the
//! batching and hands over finished traces. Every span carries the resource attributes
//! `service.name` and `openinference.project.name` (the project Arize Phoenix files spans
//! under), both the configured service name. Headers (a collector's API key) go on every
//! export; their values are secrets, never in an error or in Debug output. Beyond the config,
//! the SDK also adds headers from `OTEL_EXPORTER_OTLP_HEADERS` /
//! `OTEL_EXPORTER_OTLP_TRACES_HEADERS` when they are set.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, UNIX_EPOCH};

use opentelemetry::trace::{
    Event, SpanContext, SpanId, SpanKind as OtelSpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::tonic_types::metadata::MetadataMap;
use opentelemetry_otlp::{RetryPolicy, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _};
use rein_core::trace::{SpanKind, Trace, Value};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// The resource attribute Arize Phoenix (and other OpenInference collectors) files spans under.
pub const PROJECT_ATTRIBUTE: &str = "openinference.project.name";

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/HTTP with protobuf bodies; the endpoint is the full traces URL
    /// (`http://127.0.0.1:4318/v1/traces`).
    HttpProtobuf,
    /// OTLP/gRPC; the endpoint is the collector's address (`http://127.0.0.1:4317`). Plain
    /// `http://` only: this build has no TLS for gRPC (use OTLP/HTTP for `https://`).
    Grpc,
}

/// Where and how to export.
#[derive(Clone)]
pub struct OtlpConfig {
    /// The traces URL (HTTP) or the collector's address (gRPC).
    pub endpoint: String,
    pub protocol: Protocol,
    /// Sent on every export (HTTP headers, gRPC metadata). The values are secrets.
    pub headers: Vec<(String, String)>,
    /// Bounds one [`OtlpExporter::export`] call, its retries included.
    pub timeout: Duration,
    /// The resource's `service.name` and `openinference.project.name`.
    pub service_name: String,
}

impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpConfig")
            .field("endpoint", &shown_endpoint(&self.endpoint))
            .field("protocol", &self.protocol)
            .field("headers", &RedactedHeaders(&self.headers))
            .field("timeout", &self.timeout)
            .field("service_name", &self.service_name)
            .finish()
    }
}

/// The endpoint without the userinfo it may carry.
fn shown_endpoint(endpoint: &str) -> String {
    match reqwest::Url::parse(endpoint) {
        Ok(mut url) if !url.username().is_empty() || url.password().is_some() => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.to_string()
        }
        _ => endpoint.to_string(),
    }
}

/// Header names with their values hidden.
struct RedactedHeaders<'a>(&'a [(String, String)]);

impl std::fmt::Debug for RedactedHeaders<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.0.iter().map(|(name, _)| (name, "<redacted>"))).finish()
    }
}

/// Sends rein's traces to an OTLP collector. Shareable behind an `Arc`: concurrent
/// [`export`](Self::export) calls take turns (the SDK's exporters expect one at a time).
pub struct OtlpExporter {
    inner: tokio::sync::Mutex<opentelemetry_otlp::SpanExporter>,
    scope: InstrumentationScope,
    endpoint: String,
    protocol: Protocol,
    timeout: Duration,
    headers: Vec<(String, String)>,
}

impl std::fmt::Debug for OtlpExporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the SDK's exporter: its Debug prints the headers' values.
        f.debug_struct("OtlpExporter")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("timeout", &self.timeout)
            .field("headers", &RedactedHeaders(&self.headers))
            .finish_non_exhaustive()
    }
}

impl OtlpExporter {
    /// An exporter for `config`. Connects lazily: a collector that is down fails the exports,
    /// not this. Must be called inside a tokio runtime (the gRPC channel's worker is spawned on
    /// it).
    pub fn new(config: &OtlpConfig) -> Result<Self, String> {
        let scrub = |message: String| scrub(message, &config.headers);
        let url = reqwest::Url::parse(&config.endpoint)
            .map_err(|error| scrub(format!("OTLP endpoint {:?}: {error}", config.endpoint)))?;
        // Errors and Debug name the endpoint without its userinfo, a secret too when set.
        let endpoint = shown_endpoint(&config.endpoint);
        if !matches!(url.scheme(), "http" | "https") {
            return Err(scrub(format!(
                "OTLP endpoint {endpoint:?}: the scheme must be http or https"
            )));
        }
        if config.protocol == Protocol::Grpc && url.scheme() == "https" {
            return Err(scrub(format!(
                "OTLP endpoint {endpoint:?}: gRPC over TLS is not supported; use http:// or OTLP/HTTP"
            )));
        }
        if config.timeout.is_zero() {
            return Err("OTLP timeout must be more than zero".to_string());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err("the OTLP exporter must be made inside a tokio runtime".to_string());
        }
        let headers = header_map(&config.headers)?;
        // The HTTP exporter builds a reqwest client, which needs rustls' provider installed.
        rein_providers::install_crypto_provider();
        let built = match config.protocol {
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_endpoint(config.endpoint.as_str())
                .with_timeout(config.timeout)
                .with_retry_policy(RetryPolicy::recommended())
                .with_headers(config.headers.iter().cloned().collect::<HashMap<_, _>>())
                .build(),
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(config.endpoint.as_str())
                .with_timeout(config.timeout)
                .with_retry_policy(RetryPolicy::recommended())
                .with_metadata(MetadataMap::from_headers(headers))
                .build(),
        };
        let mut exporter =
            built.map_err(|error| scrub(format!("OTLP exporter for {endpoint}: {error}")))?;
        let resource = Resource::builder_empty()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new(PROJECT_ATTRIBUTE, config.service_name.clone()))
            .build();
        exporter.set_resource(&resource);
        Ok(Self {
            inner: tokio::sync::Mutex::new(exporter),
            scope: InstrumentationScope::builder("rein")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            endpoint,
            protocol: config.protocol,
            timeout: config.timeout,
            headers: config.headers.clone(),
        })
    }

    /// Sends these traces' spans in one request (retrying what the OTLP spec calls retryable),
    /// all within the configured timeout. `Ok` counts the spans sent; a trace whose ids are not
    /// W3C-shaped sends none. `Err` says why, never with a header's value.
    pub async fn export(&self, traces: &[Trace]) -> Result<usize, String> {
        let batch: Vec<SpanData> =
            traces.iter().flat_map(|trace| span_data(trace, &self.scope)).collect();
        let count = batch.len();
        if count == 0 {
            return Ok(0);
        }
        let send = async {
            let exporter = self.inner.lock().await;
            exporter.export(batch).await
        };
        match tokio::time::timeout(self.timeout, send).await {
            Ok(Ok(())) => Ok(count),
            Ok(Err(error)) => Err(scrub(
                format!("OTLP export of {count} spans to {} failed: {error}", self.endpoint),
                &self.headers,
            )),
            Err(_) => Err(format!(
                "OTLP export of {count} spans to {} timed out after {} ms",
                self.endpoint,
                self.timeout.as_millis()
            )),
        }
    }
}

/// The headers as HTTP headers, each checked; an error names the header, never its value.
fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let key = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("OTLP header {name:?} is not a valid header name"))?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            format!("OTLP header {name:?} has a value that is not a valid header value")
        })?;
        map.append(key, value);
    }
    Ok(map)
}

/// `message` with every header value in it replaced.
fn scrub(mut message: String, headers: &[(String, String)]) -> String {
    for (_, value) in headers {
        if !value.is_empty() && message.contains(value.as_str()) {
            message = message.replace(value.as_str(), "<redacted>");
        }
    }
    message
}

fn trace_id(hex: &str) -> Option<TraceId> {
    let id = (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| TraceId::from_hex(hex).ok())??;
    (id != TraceId::INVALID).then_some(id)
}

fn span_id(hex: &str) -> Option<SpanId> {
    let id = (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| SpanId::from_hex(hex).ok())??;
    (id != SpanId::INVALID).then_some(id)
}

fn key_value(key: &str, value: &Value) -> KeyValue {
    let key = key.to_string();
    match value {
        Value::Bool(value) => KeyValue::new(key, *value),
        Value::Int(value) => KeyValue::new(key, *value),
        Value::Float(value) => KeyValue::new(key, *value),
        Value::Str(value) => KeyValue::new(key, value.clone()),
    }
}

/// The spans of `trace` as the SDK's span data, produced by `scope`. Times are the trace's start
/// plus each span's offsets; a parent that is none of the trace's own spans (the caller's span,
/// from `traceparent`) is marked remote; a span with an error has status Error with its
/// description, the others Unset. A trace id that is not 32 hex digits (or all zeros) gives no
/// spans, and so does a span id that is not 16; a parent id that is not one is dropped.
pub fn span_data(trace: &Trace, scope: &InstrumentationScope) -> Vec<SpanData> {
    let Some(trace_id) = trace_id(&trace.trace_id) else { return Vec::new() };
    let own: BTreeSet<&str> = trace.spans.iter().map(|span| span.span_id.as_str()).collect();
    let at = |offset_ms: u64| {
        UNIX_EPOCH + Duration::from_millis(trace.started_unix_ms.saturating_add(offset_ms))
    };
    trace
        .spans
        .iter()
        .filter_map(|span| {
            let id = span_id(&span.span_id)?;
            let parent =
                span.parent_id.as_deref().and_then(|parent| Some((parent, span_id(parent)?)));
            let mut events = SpanEvents::default();
            events.events = span
                .events
                .iter()
                .map(|event| {
                    let attributes =
                        event.attributes.iter().map(|(k, v)| key_value(k, v)).collect();
                    Event::new(event.name.clone(), at(event.at_ms), attributes, 0)
                })
                .collect();
            Some(SpanData {
                span_context: SpanContext::new(
                    trace_id,
                    id,
                    TraceFlags::SAMPLED,
                    false,
                    TraceState::default(),
                ),
                parent_span_id: parent.map_or(SpanId::INVALID, |(_, parent)| parent),
                parent_span_is_remote: parent.is_some_and(|(hex, _)| !own.contains(hex)),
                span_kind: match span.kind {
                    SpanKind::Server => OtelSpanKind::Server,
                    SpanKind::Client => OtelSpanKind::Client,
                    SpanKind::Internal => OtelSpanKind::Internal,
                },
                name: Cow::Owned(span.name.clone()),
                start_time: at(span.start_ms),
                end_time: at(span.end_ms.max(span.start_ms)),
                attributes: span.attributes.iter().map(|(k, v)| key_value(k, v)).collect(),
                dropped_attributes_count: 0,
                events,
                links: Default::default(),
                status: match &span.error {
                    Some(description) => Status::error(description.clone()),
                    None => Status::Unset,
                },
                instrumentation_scope: scope.clone(),
            })
        })
        .collect()
}

#[async_trait::async_trait]
impl crate::recorder::TraceSink for OtlpExporter {
    async fn export(&self, traces: &[Trace]) -> Result<usize, String> {
        OtlpExporter::export(self, traces).await
    }
}

impl OtlpConfig {
    /// The exporter settings `[traces]` describes, when it exports.
    pub fn of(traces: &crate::config::traces::TracesConfig) -> Option<Self> {
        use crate::config::traces::OtlpProtocol;
        let otlp = traces.otlp.as_ref()?;
        Some(Self {
            endpoint: otlp.endpoint.clone(),
            protocol: match otlp.protocol {
                OtlpProtocol::HttpProtobuf => Protocol::HttpProtobuf,
                OtlpProtocol::Grpc => Protocol::Grpc,
            },
            headers: otlp
                .headers
                .iter()
                .map(|(name, value)| (name.clone(), value.expose().to_string()))
                .collect(),
            timeout: otlp.timeout,
            service_name: traces.service_name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use rein_core::trace::{Attributes, Span, SpanEvent};

    use super::*;

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const CALLER: &str = "00f067aa0ba902b7";
    const ROOT: &str = "a1b2c3d4e5f60718";
    const ATTEMPT: &str = "0102030405060708";

    fn span(id: &str, parent: Option<&str>, kind: SpanKind, start: u64, end: u64) -> Span {
        Span {
            span_id: id.into(),
            parent_id: parent.map(str::to_string),
            name: format!("span {id}"),
            kind,
            start_ms: start,
            end_ms: end,
            attributes: Attributes::new(),
            events: Vec::new(),
            error: None,
        }
    }

    fn trace() -> Trace {
        let mut root = span(ROOT, Some(CALLER), SpanKind::Server, 0, 360);
        root.name = "chat support".into();
        root.attributes.insert("gen_ai.operation.name".into(), "chat".into());
        root.attributes.insert("rein.attempts".into(), Value::Int(2));
        root.attributes.insert("rein.failover".into(), Value::Bool(false));
        root.attributes.insert("rein.score".into(), Value::Float(0.5));
        root.events.push(SpanEvent::new("tier_skipped", 250).with("rein.tier", "primary"));
        let mut attempt = span(ATTEMPT, Some(ROOT), SpanKind::Client, 150, 250);
        attempt.attributes.insert("rein.clock".into(), "first_token".into());
        attempt.error = Some("timeout".into());
        let wait = span("1112131415161718", Some(ROOT), SpanKind::Internal, 100, 150);
        Trace {
            trace_id: TRACE.into(),
            request_id: "req_1".into(),
            target: "support".into(),
            operation: "chat".into(),
            started_unix_ms: 1_700_000_000_000,
            outcome: "fallback".into(),
            spans: vec![root, attempt, wait],
        }
    }

    fn scope() -> InstrumentationScope {
        InstrumentationScope::builder("rein").build()
    }

    #[test]
    fn ids_and_the_remote_parent_are_the_traces() {
        let spans = span_data(&trace(), &scope());
        assert_eq!(spans.len(), 3);
        let trace_id = TraceId::from_hex(TRACE).unwrap();
        assert!(spans.iter().all(|s| s.span_context.trace_id() == trace_id));
        assert!(spans.iter().all(|s| s.span_context.is_sampled()));
        let root = &spans[0];
        assert_eq!(root.span_context.span_id(), SpanId::from_hex(ROOT).unwrap());
        assert_eq!(root.parent_span_id, SpanId::from_hex(CALLER).unwrap());
        assert!(root.parent_span_is_remote, "the caller's span is the root's remote parent");
        assert_eq!(root.span_kind, OtelSpanKind::Server);
        assert_eq!(root.name, "chat support");
        let attempt = &spans[1];
        assert_eq!(attempt.span_context.span_id(), SpanId::from_hex(ATTEMPT).unwrap());
        assert_eq!(attempt.parent_span_id, SpanId::from_hex(ROOT).unwrap());
        assert!(!attempt.parent_span_is_remote);
        assert_eq!(attempt.span_kind, OtelSpanKind::Client);
        assert_eq!(spans[2].span_kind, OtelSpanKind::Internal);
        assert_eq!(root.instrumentation_scope.name(), "rein");
    }

    #[test]
    fn a_root_without_a_caller_has_no_parent() {
        let mut trace = trace();
        trace.spans[0].parent_id = None;
        let root = &span_data(&trace, &scope())[0];
        assert_eq!(root.parent_span_id, SpanId::INVALID);
        assert!(!root.parent_span_is_remote);
    }

    #[test]
    fn times_are_the_traces_start_plus_the_offsets() {
        let spans = span_data(&trace(), &scope());
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(1_700_000_000_000 + ms);
        assert_eq!((spans[0].start_time, spans[0].end_time), (at(0), at(360)));
        assert_eq!((spans[1].start_time, spans[1].end_time), (at(150), at(250)));
        assert_eq!(spans[0].events[0].timestamp, at(250));
    }

    #[test]
    fn attributes_events_and_status_carry_over() {
        let spans = span_data(&trace(), &scope());
        let root = &spans[0];
        let value = |span: &SpanData, key: &str| {
            span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.clone())
        };
        use opentelemetry::Value as V;
        assert_eq!(value(root, "gen_ai.operation.name"), Some(V::from("chat")));
        assert_eq!(value(root, "rein.attempts"), Some(V::I64(2)));
        assert_eq!(value(root, "rein.failover"), Some(V::Bool(false)));
        assert_eq!(value(root, "rein.score"), Some(V::F64(0.5)));
        assert_eq!(root.attributes.len(), 4);
        assert_eq!(root.events.len(), 1);
        let event = &root.events[0];
        assert_eq!(event.name, "tier_skipped");
        assert_eq!(event.attributes, vec![KeyValue::new("rein.tier", "primary")]);
        assert_eq!(root.status, Status::Unset);
        assert_eq!(spans[1].status, Status::error("timeout"));
        assert_eq!(value(&spans[1], "rein.clock"), Some(V::from("first_token")));
    }

    #[test]
    fn malformed_ids_send_nothing_for_what_they_name() {
        let mut bad_trace = trace();
        bad_trace.trace_id = "not-a-trace-id".into();
        assert!(span_data(&bad_trace, &scope()).is_empty());
        bad_trace.trace_id = "0".repeat(32);
        assert!(span_data(&bad_trace, &scope()).is_empty());

        let mut bad_span = trace();
        bad_span.spans[2].span_id = "xyz".into();
        bad_span.spans[1].parent_id = Some("+123".into());
        let spans = span_data(&bad_span, &scope());
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[1].parent_span_id, SpanId::INVALID);
    }

    fn config(protocol: Protocol, endpoint: &str) -> OtlpConfig {
        OtlpConfig {
            endpoint: endpoint.into(),
            protocol,
            headers: vec![("x-api-key".into(), "sekret-value".into())],
            timeout: Duration::from_secs(2),
            service_name: "rein".into(),
        }
    }

    #[tokio::test]
    async fn debug_output_never_shows_a_header_value() {
        let config = config(Protocol::HttpProtobuf, "http://127.0.0.1:1/v1/traces");
        let shown = format!("{config:?}");
        assert!(shown.contains("x-api-key") && !shown.contains("sekret"), "{shown}");
        let exporter = OtlpExporter::new(&config).unwrap();
        let shown = format!("{exporter:?}");
        assert!(shown.contains("x-api-key") && !shown.contains("sekret"), "{shown}");
        let grpc = OtlpExporter::new(&self::config(Protocol::Grpc, "http://127.0.0.1:1")).unwrap();
        assert!(!format!("{grpc:?}").contains("sekret"));
    }

    #[tokio::test]
    async fn an_endpoints_userinfo_is_never_shown() {
        let config = config(Protocol::Grpc, "http://user:pa55word@127.0.0.1:1");
        assert!(!format!("{config:?}").contains("pa55word"));
        let exporter = OtlpExporter::new(&config).unwrap();
        assert!(!format!("{exporter:?}").contains("pa55word"));
        let mut tls = config.clone();
        tls.endpoint = "https://user:pa55word@collector:4317".into();
        let error = OtlpExporter::new(&tls).unwrap_err();
        assert!(error.contains("collector:4317") && !error.contains("pa55word"), "{error}");
    }

    #[tokio::test]
    async fn bad_configs_are_refused_by_name() {
        let refused = |config: OtlpConfig| OtlpExporter::new(&config).unwrap_err();
        assert!(refused(config(Protocol::HttpProtobuf, "")).contains("OTLP endpoint"));
        assert!(refused(config(Protocol::Grpc, "ftp://collector")).contains("scheme"));
        assert!(refused(config(Protocol::Grpc, "https://collector:4317")).contains("TLS"));
        let mut zero = config(Protocol::HttpProtobuf, "http://127.0.0.1:1/v1/traces");
        zero.timeout = Duration::ZERO;
        assert!(refused(zero).contains("timeout"));
        let mut bad = config(Protocol::HttpProtobuf, "http://127.0.0.1:1/v1/traces");
        bad.headers = vec![("x-api-key".into(), "line\nbreak-sekret".into())];
        let error = refused(bad);
        assert!(error.contains("x-api-key") && !error.contains("sekret"), "{error}");
        bad = config(Protocol::Grpc, "http://127.0.0.1:1");
        bad.headers = vec![("bad header".into(), "sekret".into())];
        assert!(refused(bad).contains("bad header"));
    }

    #[tokio::test]
    async fn the_exporter_is_shared_across_tasks() {
        fn send_sync<T: Send + Sync>(_: &T) {}
        let exporter = std::sync::Arc::new(
            OtlpExporter::new(&config(Protocol::Grpc, "http://127.0.0.1:1")).unwrap(),
        );
        send_sync(&exporter);
        let shared = exporter.clone();
        // Nothing to send: no request is made.
        let sent = tokio::spawn(async move { shared.export(&[]).await }).await.unwrap();
        assert_eq!(sent, Ok(0));
    }

    #[test]
    fn outside_a_runtime_the_exporter_is_refused() {
        let error = OtlpExporter::new(&config(Protocol::Grpc, "http://127.0.0.1:1")).unwrap_err();
        assert!(error.contains("tokio runtime"), "{error}");
    }

    #[test]
    fn errors_are_scrubbed_of_header_values() {
        let headers = vec![("authorization".to_string(), "Bearer abc123".to_string())];
        assert_eq!(
            scrub("rejected Bearer abc123 at host".into(), &headers),
            "rejected <redacted> at host"
        );
    }
}
