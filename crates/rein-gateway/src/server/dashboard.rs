//! The operator's page at `GET /` and a call's trace at `GET /traces/{id}`: server-rendered HTML
//! with inline CSS and hand-drawn SVG charts, no script and nothing loaded from elsewhere. The
//! page shows each route's SLIs over the last hour (availability, fallback beyond plan, degraded
//! share and latency p95 in 12 buckets, from the same view as `GET /admin/sli`) and for the
//! whole hour, every tier's breaker (an open one with the time to its next probe), the kill
//! switch and its recent flips, the levers engaged on each route beside its quality score, the outbox, the latest hand-offs and the latest calls not
//! answered on the first try, each linking to its trace. Every number carries its raw value
//! (`data-sli="<route>:<field>"` with `data-value`, `data-tier="<route>:<tier>"` with
//! `data-state`), so a test can hold the page against the admin API.
//!
//! With an admin key configured both pages need it, as a bearer token or as the password of
//! HTTP Basic credentials (any user name): a refusal is a 401 asking for Basic, so a browser
//! prompts. Without one, they are open on loopback or with `server.metrics_public = true`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use rein_core::breaker::{Admission, BreakerState};
use rein_core::sli::{Bucket, Slis};
use rein_core::{KillFlip, KillScope};
use rein_store::calls::{TraceFilter, TraceSummary};
use rein_store::handoffs::{Handoff, HandoffFilter};
use serde_json::Value;

use super::admin_slis::{SliQuery, sli_view};
use super::{Gateway, admin_allowed, escape};

/// How long a page waits for the recorder to write what is queued.
const FLUSH_WAIT: Duration = Duration::from_secs(2);
/// The latest hand-offs shown.
const HANDOFFS: i64 = 10;
/// The latest failing calls shown.
const FAILING_CALLS: i64 = 20;
/// The latest kill-switch flips shown.
const FLIPS: usize = 10;
/// The longest customer message shown, in characters.
const MESSAGE_CHARS: usize = 240;

const STYLE: &str = "\
body{font:13px/1.4 system-ui,sans-serif;margin:1.2em 2em;color:#222;max-width:1240px}\
h1{font-size:20px;margin:0 0 .2em}h2{font-size:15px;margin:1.6em 0 .5em;border-bottom:1px solid #ddd;padding-bottom:2px}\
h3{font-size:13px;margin:.8em 0 .3em}\
table{border-collapse:collapse;margin:.3em 0}td,th{padding:3px 10px;text-align:left;border-bottom:1px solid #eee;vertical-align:top}\
th{font-weight:600;color:#555;background:#fafafa}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
.muted{color:#777}.note{background:#fff8e1;border:1px solid #f0d98c;padding:6px 10px;display:inline-block}\
.closed,.off{color:#187a3c;font-weight:600}.open,.on{color:#b3261e;font-weight:600}.half_open{color:#a15c00;font-weight:600}\
.charts{display:flex;flex-wrap:wrap;gap:10px}svg{background:#fcfcfc;border:1px solid #e4e4e4}\
svg text{font:10px system-ui,sans-serif;fill:#555}svg .t{font-weight:600;fill:#222}svg .v{font-weight:600;font-size:11px}\
pre{background:#f6f6f6;border:1px solid #e4e4e4;padding:8px 10px;overflow-x:auto;font-size:12px}\
code,.id{font:11px ui-monospace,monospace}nav a{margin-right:1em}";

/// Who may see the pages: with an admin key configured, whoever presents it; without, anyone
/// on loopback or with `server.metrics_public = true`.
fn refused(gateway: &Gateway, headers: &HeaderMap) -> Option<Response> {
    let runtime = gateway.current();
    if runtime.config.server.admin_key.is_some() {
        if admin_allowed(&runtime, headers) {
            return None;
        }
        let message = "this page needs the admin key: `Authorization: Bearer <admin key>`, or HTTP Basic credentials with the admin key as the password (any user name)\n";
        return Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Basic realm=\"rein\", charset=\"UTF-8\"")],
                message,
            )
                .into_response(),
        );
    }
    if gateway.runtime.listen().ip().is_loopback() || runtime.config.server.metrics_public {
        return None;
    }
    let message = "off loopback this page needs an admin key (`server.admin_key_env`) or `server.metrics_public = true`\n";
    Some((StatusCode::FORBIDDEN, message).into_response())
}

/// An HTML answer that no cache keeps and that may load nothing from anywhere.
fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let page = format!(
        "<!doctype html><html lang=en><meta charset=utf-8>\
         <meta name=viewport content=\"width=device-width\"><title>{}</title>\
         <style>{STYLE}</style><body>{body}</body></html>",
        escape(title)
    );
    (
        status,
        [
            (header::CACHE_CONTROL, "no-store"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'none'",
            ),
        ],
        Html(page),
    )
        .into_response()
}

/// `GET /`: the operator's page.
pub(super) async fn page(State(gateway): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&gateway, &headers) {
        return refused;
    }
    let runtime = gateway.current();
    let now = rein_core::clock::unix_ms() as i64;
    let mut body = String::new();
    let _ = write!(
        body,
        "<h1>rein</h1><p class=muted>config version {} · routes: {} · {}</p>\
         <nav><a href=/metrics>metrics</a><a href=\"/admin/sli?window=1h\">/admin/sli</a>\
         <a href=/admin/tiers>/admin/tiers</a><a href=/admin/kill>/admin/kill</a>\
         <a href=\"/admin/traces?notable=true\">/admin/traces</a><a href=/admin/handoffs>/admin/handoffs</a></nav>",
        runtime.version,
        escape(&gateway.runtime.engine.route_names().join(", ")),
        when(now),
    );
    body.push_str(&kill_section(&gateway));
    let query =
        SliQuery { window: Some("1h".into()), route: None, buckets: Some(12), since_ms: None };
    let view = match sli_view(&gateway, &query).await {
        Ok(view) => {
            body.push_str(&sli_section(&view));
            Some(view)
        }
        Err(refusal) => {
            let why = refusal_message(refusal).await;
            let _ =
                write!(body, "<h2>SLIs, last hour</h2><p class=note>No SLIs: {}</p>", escape(&why));
            None
        }
    };
    body.push_str(&lever_section(&gateway, view.as_ref()));
    body.push_str(&probe_section(&gateway, &runtime));
    body.push_str(&tier_section(&gateway));
    body.push_str(&outbox_section(&runtime).await);
    body.push_str(&handoff_section(&gateway, now).await);
    body.push_str(&failing_section(&gateway).await);
    html(StatusCode::OK, "rein", &body)
}

/// What an admin error answer says (`{"error": {"message": ...}}`), for a note on the page.
async fn refusal_message(response: Response) -> String {
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 64 * 1024).await.unwrap_or_default();
    serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|value| value["error"]["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("the SLI view answered {status}"))
}

// ---------------------------------------------------------------------------------------------
// SLIs

/// One route's SLIs over the window, as the view gives them.
struct RouteSlis {
    route: String,
    slis: Slis,
}

fn sli_section(view: &Value) -> String {
    let routes: Vec<RouteSlis> = view["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let route = entry["route"].as_str()?.to_string();
            let slis = serde_json::from_value(entry["slis"].clone()).ok()?;
            Some(RouteSlis { route, slis })
        })
        .collect();
    let series: BTreeMap<String, Vec<Bucket>> =
        serde_json::from_value(view["series"].clone()).unwrap_or_default();
    let window = view["window"].as_str().unwrap_or("1h");
    let mut out = format!(
        "<h2>SLIs, last {}</h2><p class=muted>{} recorded calls{}</p>",
        escape(window),
        view["calls"].as_u64().unwrap_or(0),
        if view["truncated"] == Value::Bool(true) { " (truncated)" } else { "" },
    );
    if routes.is_empty() {
        out.push_str("<p class=muted>No calls recorded in the window.</p>");
        return out;
    }
    out.push_str(
        "<table><tr><th>route</th><th class=n>calls</th><th class=n>availability</th>\
         <th class=n>fallback beyond plan</th><th class=n>degraded</th><th class=n>p50</th>\
         <th class=n>p95</th><th>escalations</th></tr>",
    );
    for RouteSlis { route, slis } in &routes {
        let latency = slis.latency_end_ms;
        let escalations = if slis.escalation_rate.is_empty() {
            "<span class=muted>none</span>".to_string()
        } else {
            slis.escalation_rate
                .iter()
                .map(|(trigger, rate)| {
                    let key = format!("{route}:escalation_rate.{trigger}");
                    format!(
                        "{} {}",
                        escape(trigger),
                        number(&key, &rate.to_string(), &percent(*rate))
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = write!(
            out,
            "<tr><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td>\
             <td class=n>{}</td><td class=n>{}</td><td class=n>{}</td><td>{escalations}</td></tr>",
            escape(route),
            number(&format!("{route}:calls"), &slis.calls.to_string(), &slis.calls.to_string()),
            share(route, "availability", slis.availability),
            share(route, "fallback_beyond_plan", slis.fallback_beyond_plan),
            share(route, "degraded_share", slis.degraded_share),
            millis(route, "latency_end_ms.p50", latency.map(|l| l.p50)),
            millis(route, "latency_end_ms.p95", latency.map(|l| l.p95)),
        );
    }
    out.push_str("</table>");
    let since = view["since_unix_ms"].as_i64().unwrap_or(0);
    let until = view["until_unix_ms"].as_i64().unwrap_or(since);
    let span = Duration::from_millis(u64::try_from(until - since).unwrap_or(0));
    for RouteSlis { route, .. } in &routes {
        let Some(buckets) = series.get(route) else { continue };
        let _ = write!(out, "<h3>{}</h3><div class=charts>", escape(route));
        for spec in &CHARTS {
            let points: Vec<Option<f64>> = buckets.iter().map(|b| (spec.pick)(&b.slis)).collect();
            out.push_str(&chart(
                route,
                spec.field,
                spec.title,
                spec.scale,
                spec.colour,
                &points,
                span,
            ));
        }
        out.push_str("</div>");
    }
    out
}

/// One chart of each route: the SLI's field as `/admin/sli` names it, what the chart is called,
/// its scale and colour, and the SLI of a bucket.
struct ChartSpec {
    field: &'static str,
    title: &'static str,
    scale: Scale,
    colour: &'static str,
    pick: fn(&Slis) -> Option<f64>,
}

const CHARTS: [ChartSpec; 4] = [
    ChartSpec {
        field: "availability",
        title: "availability",
        scale: Scale::Share,
        colour: "#187a3c",
        pick: |s| s.availability,
    },
    ChartSpec {
        field: "fallback_beyond_plan",
        title: "fallback beyond plan",
        scale: Scale::Share,
        colour: "#c77700",
        pick: |s| s.fallback_beyond_plan,
    },
    ChartSpec {
        field: "degraded_share",
        title: "degraded share",
        scale: Scale::Share,
        colour: "#b3261e",
        pick: |s| s.degraded_share,
    },
    ChartSpec {
        field: "latency_end_ms.p95",
        title: "latency p95",
        scale: Scale::Millis,
        colour: "#1f5fbf",
        pick: |s| s.latency_end_ms.map(|l| l.p95 as f64),
    },
];

/// A number with its raw value: `data-sli="<key>" data-value="<raw>"`, empty when there is none.
fn number(key: &str, raw: &str, text: &str) -> String {
    format!(
        "<span data-sli=\"{}\" data-value=\"{}\">{}</span>",
        escape(key),
        escape(raw),
        escape(text)
    )
}

fn share(route: &str, field: &str, value: Option<f64>) -> String {
    let raw = value.map(|v| v.to_string()).unwrap_or_default();
    number(&format!("{route}:{field}"), &raw, &value.map_or_else(|| "—".into(), percent))
}

fn millis(route: &str, field: &str, value: Option<u64>) -> String {
    let raw = value.map(|v| v.to_string()).unwrap_or_default();
    let text = value.map_or_else(|| "—".into(), |v| format!("{v} ms"));
    number(&format!("{route}:{field}"), &raw, &text)
}

fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Scale {
    /// 0 to 100 %.
    Share,
    /// 0 to a round number of milliseconds at or above the highest point.
    Millis,
}

/// The smallest 1, 2 or 5 times a power of ten at or above `value` (at least 1).
fn round_up(value: f64) -> f64 {
    let mut step = 1.0;
    loop {
        for factor in [1.0, 2.0, 5.0] {
            if step * factor >= value {
                return step * factor;
            }
        }
        step *= 10.0;
    }
}

fn short_millis(ms: f64) -> String {
    if ms >= 10_000.0 { format!("{:.0}s", ms / 1000.0) } else { format!("{ms:.0}") }
}

/// One SLI of a route over the window's buckets as a line chart: the y axis labelled at 0, half
/// and top, the x axis from the window's start to now, the bars of buckets without calls left
/// out (the line breaks there), and the latest value printed top right.
fn chart(
    route: &str,
    field: &str,
    title: &str,
    scale: Scale,
    colour: &str,
    points: &[Option<f64>],
    span: Duration,
) -> String {
    const W: f64 = 284.0;
    const H: f64 = 128.0;
    const LEFT: f64 = 40.0;
    const RIGHT: f64 = 10.0;
    const TOP: f64 = 22.0;
    const BOTTOM: f64 = 20.0;
    let (plot_w, plot_h) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let top = match scale {
        Scale::Share => 1.0,
        // At least 10 ms, so that the axis' three labels differ.
        Scale::Millis => round_up(points.iter().flatten().copied().fold(10.0, f64::max)),
    };
    let label = |value: f64| match scale {
        Scale::Share => format!("{:.0}%", value * 100.0),
        Scale::Millis => short_millis(value),
    };
    let n = points.len().max(1) as f64;
    let x = |i: usize| LEFT + plot_w * (i as f64 + 0.5) / n;
    let y = |value: f64| TOP + plot_h * (1.0 - (value / top).clamp(0.0, 1.0));
    let latest = points.iter().rev().flatten().next().copied();
    let latest_text = match (latest, scale) {
        (None, _) => "—".to_string(),
        (Some(v), Scale::Share) => percent(v),
        (Some(v), Scale::Millis) => format!("{v:.0} ms"),
    };
    let key = format!("{route}:{field}");
    let mut svg = format!(
        "<svg width={W} height={H} viewBox=\"0 0 {W} {H}\" role=img data-chart=\"{}\" \
         aria-label=\"{} of {} over the last {}\">\
         <text class=t x={LEFT} y=14>{}{}</text>\
         <text class=v x={} y=14 text-anchor=end fill=\"{colour}\" data-sli-latest=\"{}\" data-value=\"{}\">{}</text>",
        escape(&key),
        escape(title),
        escape(route),
        clock_span(span),
        escape(title),
        if scale == Scale::Millis { " (ms)" } else { "" },
        W - RIGHT,
        escape(&key),
        latest.map(|v| v.to_string()).unwrap_or_default(),
        escape(&latest_text),
    );
    for fraction in [0.0, 0.5, 1.0] {
        let level = y(top * fraction);
        let _ = write!(
            svg,
            "<line x1={LEFT} x2={} y1={level:.1} y2={level:.1} stroke=\"{}\"/>\
             <text x={} y={:.1} text-anchor=end>{}</text>",
            W - RIGHT,
            if fraction == 0.0 { "#999" } else { "#e6e6e6" },
            LEFT - 4.0,
            level + 3.0,
            label(top * fraction),
        );
    }
    let bottom = H - BOTTOM + 13.0;
    let _ = write!(
        svg,
        "<text x={LEFT} y={bottom}>−{}</text><text x={:.1} y={bottom} text-anchor=middle>−{}</text>\
         <text x={} y={bottom} text-anchor=end>now</text>",
        clock_span(span),
        LEFT + plot_w / 2.0,
        clock_span(span / 2),
        W - RIGHT,
    );
    // One polyline per run of buckets with calls; a lone point is a dot.
    let mut run: Vec<(f64, f64)> = Vec::new();
    let flush = |run: &mut Vec<(f64, f64)>, svg: &mut String| {
        if run.len() > 1 {
            let list: Vec<String> = run.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect();
            let _ = write!(
                svg,
                "<polyline fill=none stroke=\"{colour}\" stroke-width=2 points=\"{}\"/>",
                list.join(" ")
            );
        }
        for (px, py) in run.iter() {
            let _ = write!(svg, "<circle cx={px:.1} cy={py:.1} r=2.2 fill=\"{colour}\"/>");
        }
        run.clear();
    };
    for (i, point) in points.iter().enumerate() {
        match point {
            Some(value) => run.push((x(i), y(*value))),
            None => flush(&mut run, &mut svg),
        }
    }
    flush(&mut run, &mut svg);
    svg.push_str("</svg>");
    svg
}

/// A span of time as the axis says it: `1h`, `30m`, `45s`.
fn clock_span(span: Duration) -> String {
    let secs = span.as_secs();
    if secs >= 3600 && secs.is_multiple_of(3600) {
        format!("{}h", secs / 3600)
    } else if secs >= 60 {
        format!("{}m", secs / 60)
    } else {
        format!("{secs}s")
    }
}

// ---------------------------------------------------------------------------------------------
// Tiers, kill switch, outbox

fn state_name(state: BreakerState) -> &'static str {
    match state {
        BreakerState::Closed => "closed",
        BreakerState::Open => "open",
        BreakerState::HalfOpen => "half_open",
    }
}

/// How long an open breaker still skips its tier. `Cooldown` tells this only through
/// [`Cooldown::admit`](rein_core::Cooldown::admit), which on an open breaker changes nothing: it
/// says when it lets a probe through. Should the cooldown end just now, admit hands out the probe
/// permit, which is dropped unused: the breaker is then half-open with no probe out, which is
/// what an ended cooldown already was.
fn next_probe(gateway: &Gateway, route: &str, tier: &str) -> Option<Duration> {
    let cooldown = gateway.runtime.engine.cooldown_of(route, tier)?.cooldown;
    match cooldown.admit() {
        Admission::Skip { retry_at: Some(at) } => {
            Some(at.saturating_duration_since(tokio::time::Instant::now()))
        }
        Admission::Skip { retry_at: None } => None,
        Admission::Allowed(permit) => {
            permit.unused();
            None
        }
    }
}

fn tier_section(gateway: &Gateway) -> String {
    let mut out = String::from(
        "<h2>Tiers</h2><table><tr><th>route</th><th>tier</th><th>provider</th><th>model</th>\
         <th>breaker</th><th>next probe</th></tr>",
    );
    for tier in gateway.runtime.engine.tier_states() {
        let state = state_name(tier.state);
        let probe = match tier.state {
            BreakerState::Open => match next_probe(gateway, &tier.route, &tier.tier) {
                Some(wait) => format!(
                    "<span data-next-probe-ms={}>in {}</span>",
                    wait.as_millis(),
                    age(wait.as_millis() as i64)
                ),
                None => "now".into(),
            },
            BreakerState::HalfOpen => "probing".into(),
            BreakerState::Closed => String::new(),
        };
        let _ = write!(
            out,
            "<tr data-tier=\"{}:{}\" data-state={state}><td>{}</td><td>{}</td><td>{}</td>\
             <td><code>{}</code></td><td class={state}>{}</td><td>{probe}</td></tr>",
            escape(&tier.route),
            escape(&tier.tier),
            escape(&tier.route),
            escape(&tier.tier),
            escape(&tier.provider),
            escape(&tier.model),
            state.replace('_', "-"),
        );
    }
    out.push_str("</table>");
    out
}

fn scope_name(scope: &KillScope) -> String {
    match scope {
        KillScope::Global => "every route".into(),
        KillScope::Route(route) => format!("route {route}"),
    }
}

fn kill_section(gateway: &Gateway) -> String {
    let switch = gateway.runtime.engine.kill_switch();
    let audit = switch.audit();
    // The switch ends as the last flip of each scope left it.
    let last = |scope: &KillScope| -> Option<&KillFlip> {
        audit.iter().rev().find(|flip| &flip.scope == scope).filter(|flip| flip.engaged)
    };
    let engaged = |flip: Option<&KillFlip>| match flip {
        Some(flip) => format!("<span class=on>engaged</span> — {}", escape(&flip.reason)),
        None => "<span class=off>off</span>".into(),
    };
    let global = last(&KillScope::Global);
    let mut out = format!(
        "<h2>Kill switch</h2><p data-kill=global data-engaged={}>Every route: {}</p>\
         <table><tr><th>route</th><th>switch</th></tr>",
        global.is_some(),
        engaged(global),
    );
    for route in gateway.runtime.engine.route_names() {
        let own = last(&KillScope::Route(route.clone()));
        let text = match (own, global) {
            (None, Some(_)) => "<span class=on>engaged</span> (every route)".into(),
            (own, _) => engaged(own),
        };
        let _ = write!(
            out,
            "<tr data-kill=\"route:{}\" data-engaged={}><td>{}</td><td>{text}</td></tr>",
            escape(&route),
            switch.engaged_for(&route).is_some(),
            escape(&route),
        );
    }
    out.push_str("</table>");
    if audit.is_empty() {
        out.push_str("<p class=muted>Never flipped.</p>");
        return out;
    }
    out.push_str(
        "<h3>Recent flips</h3><table><tr><th>when</th><th>scope</th><th>flip</th><th>reason</th></tr>",
    );
    for flip in audit.iter().rev().take(FLIPS) {
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td class={}>{}</td><td>{}</td></tr>",
            when(flip.at_unix_ms as i64),
            escape(&scope_name(&flip.scope)),
            if flip.engaged { "on" } else { "off" },
            if flip.engaged { "engaged" } else { "released" },
            escape(&flip.reason),
        );
    }
    out.push_str("</table>");
    out
}

// ---------------------------------------------------------------------------------------------
// Levers

/// The levers engaged on each route (as `GET /admin/routes/{route}/levers` says), beside its
/// quality: the judge's score of sampled answers over the hour (`data-quality`, the SLI view's
/// `quality`) and the golden-prompt probe's last score for the route (`data-probe-route`).
fn lever_section(gateway: &Gateway, view: Option<&Value>) -> String {
    let quality_of = |route: &str| -> Option<f64> {
        view?["routes"].as_array()?.iter().find(|entry| entry["route"] == route)?["slis"]["quality"]
            .as_f64()
    };
    let probe = gateway.probe.last();
    let probe_of = |route: &str| -> Option<f64> {
        let results: Vec<_> = probe.as_ref()?.results.iter().filter(|r| r.route == route).collect();
        (!results.is_empty()).then(|| {
            results.iter().filter(|r| r.result == "pass").count() as f64 / results.len() as f64
        })
    };
    let mut out = String::from(
        "<h2>Levers</h2><p class=muted>Most easily undone first: revert, pin a model, route to a \
         tier, the kill switch (<code>rein levers ROUTE</code>).</p><table><tr><th>route</th>\
         <th class=n>quality (judge, 1h)</th><th class=n>probe</th><th>settings</th>\
         <th>route to</th><th>kill switch</th><th>engaged</th></tr>",
    );
    for route in gateway.runtime.engine.route_names() {
        let levers = super::admin_levers::levers_view(gateway, &route);
        let engaged: Vec<&str> = levers["engaged"]
            .as_array()
            .map(|all| all.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let settings = &levers["settings"];
        let settings_text = match settings["version"].as_i64() {
            None => "none".to_string(),
            Some(version) => {
                let how = match settings["lever"].as_str() {
                    Some("revert") => " reverted",
                    Some("pin_model") => " model pinned",
                    _ => "",
                };
                format!(
                    "v{version}{how} by {} {}",
                    escape(settings["author"].as_str().unwrap_or("-")),
                    when(settings["since_unix_ms"].as_i64().unwrap_or(0)),
                )
            }
        };
        // A cell's class says on or off; its text is plain (one text node, for a reader).
        let flip_text = |flip: &Value, what: String| match flip["since_unix_ms"].as_i64() {
            None => ("off", "off".to_string()),
            Some(since) => (
                "on",
                format!(
                    "{} since {} — {}",
                    escape(&what),
                    when(since),
                    escape(flip["reason"].as_str().unwrap_or("")),
                ),
            ),
        };
        let route_to = &levers["route_to"];
        let route_to_text =
            flip_text(route_to, format!("tier {}", route_to["tier"].as_str().unwrap_or("-")));
        let kill = &levers["kill_switch"];
        let kill_text = if kill["route"].is_null() && !kill["global"].is_null() {
            flip_text(&kill["global"], "engaged (every route)".into())
        } else {
            flip_text(&kill["route"], "engaged".into())
        };
        let quality = quality_of(&route);
        let probe_score = probe_of(&route);
        let _ = write!(
            out,
            "<tr data-levers=\"{route}\" data-engaged=\"{engaged}\"><td>{route}</td>\
             <td class=n><span data-quality=\"{route}\" data-value=\"{}\">{}</span></td>\
             <td class=n><span data-probe-route=\"{route}\" data-value=\"{}\">{}</span></td>\
             <td data-lever=\"{route}:settings\">{settings_text}</td>\
             <td data-lever=\"{route}:route_to\" class={}>{}</td>\
             <td data-lever=\"{route}:kill_switch\" class={}>{}</td><td>{}</td></tr>",
            quality.map(|q| q.to_string()).unwrap_or_default(),
            quality.map_or_else(|| "—".into(), percent),
            probe_score.map(|q| q.to_string()).unwrap_or_default(),
            probe_score.map_or_else(|| "—".into(), percent),
            route_to_text.0,
            route_to_text.1,
            kill_text.0,
            kill_text.1,
            if engaged.is_empty() {
                "<span class=muted>none</span>".into()
            } else {
                escape(&engaged.join(", "))
            },
            route = escape(&route),
            engaged = escape(&engaged.join(" ")),
        );
    }
    out.push_str("</table>");
    out
}

/// The golden-prompt probe's last run: its score and each question's result, with the tier
/// and model that answered. Nothing when the config has no probe.
fn probe_section(gateway: &Gateway, runtime: &rein_runtime::Snapshot) -> String {
    if runtime.config.probe.questions.is_empty() {
        return String::new();
    }
    let Some(run) = gateway.probe.last() else {
        return "<h2>Golden-prompt probe</h2><p class=muted>It has not run yet.</p>".into();
    };
    let mut out = format!(
        "<h2>Golden-prompt probe</h2><p>Last run {}: <b data-probe=score data-value={}>{:.0}%</b>          of {} question(s) passed</p><table><tr><th>question</th><th>route</th><th>result</th>         <th>tier</th><th>model</th><th>detail</th></tr>",
        when(i64::try_from(run.at_unix_ms).unwrap_or(i64::MAX)),
        run.score,
        run.score * 100.0,
        run.results.len(),
    );
    for result in &run.results {
        let _ = write!(
            out,
            "<tr data-probe-question={}><td>{}</td><td>{}</td><td data-result={}>{}</td>             <td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&result.id),
            escape(&result.id),
            escape(&result.route),
            result.result,
            result.result,
            escape(result.tier.as_deref().unwrap_or("-")),
            escape(result.model.as_deref().unwrap_or("-")),
            escape(result.detail.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</table>");
    out
}

async fn outbox_section(runtime: &rein_runtime::Snapshot) -> String {
    let tools = &runtime.tools;
    let stats = match tools.outbox_stats().await {
        Ok(stats) => stats,
        Err(error) => {
            return format!(
                "<h2>Outbox</h2><p class=note>Cannot read the outbox: {}</p>",
                escape(&error.to_string())
            );
        }
    };
    let oldest = match stats.oldest_pending_created_unix_ms {
        Some(created) => {
            let waited = (tools.now_unix_ms() - created).max(0);
            format!("<span data-outbox=oldest_age_ms data-value={waited}>{}</span>", age(waited))
        }
        None => "<span class=muted>nothing pending</span>".into(),
    };
    format!(
        "<h2>Outbox</h2><table><tr><th class=n>pending</th><th class=n>failed</th>\
         <th class=n>held for review</th><th>oldest pending</th></tr>\
         <tr><td class=n data-outbox=pending>{}</td><td class=n data-outbox=failed>{}</td>\
         <td class=n data-outbox=review>{}</td><td>{oldest}</td></tr></table>",
        stats.pending, stats.failed, stats.review,
    )
}

// ---------------------------------------------------------------------------------------------
// Hand-offs and failing calls

/// A serde enum's name (`pending`, `approved`, ...).
fn serde_name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => name,
        _ => "?".into(),
    }
}

async fn handoff_section(gateway: &Gateway, now: i64) -> String {
    let mut out = String::from("<h2>Recent hand-offs</h2>");
    let list: Vec<Handoff> =
        match gateway.runtime.escalations.list(&HandoffFilter::default(), HANDOFFS).await {
            Ok(list) => list,
            Err(error) => {
                let _ = write!(
                    out,
                    "<p class=note>Cannot read the hand-offs: {}</p>",
                    escape(&error.to_string())
                );
                return out;
            }
        };
    if list.is_empty() {
        out.push_str("<p class=muted>None yet.</p>");
        return out;
    }
    out.push_str(
        "<table><tr><th class=n>id</th><th>created</th><th>route</th><th>trigger</th>\
         <th>delivery</th><th>decision</th><th>customer message</th></tr>",
    );
    for handoff in list {
        let message = handoff.packet["customer_message"].as_str().unwrap_or("");
        let mut shown: String = message.chars().take(MESSAGE_CHARS).collect();
        if shown.len() < message.len() {
            shown.push('…');
        }
        let decision = handoff.decision.map_or_else(|| "undecided".into(), serde_name);
        let _ = write!(
            out,
            "<tr data-handoff={}><td class=n>{}</td><td>{} <span class=muted>({} ago)</span></td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            handoff.id,
            handoff.id,
            when(handoff.created_unix_ms),
            age(now - handoff.created_unix_ms),
            escape(handoff.route.as_deref().unwrap_or("")),
            escape(&handoff.trigger),
            escape(&serde_name(handoff.delivery)),
            escape(&decision),
            escape(&shown),
        );
    }
    out.push_str("</table>");
    out
}

async fn failing_section(gateway: &Gateway) -> String {
    let mut out = String::from("<h2>Latest calls not answered on the first try</h2>");
    if gateway.runtime.recorder.enabled() {
        gateway.runtime.recorder.flush(FLUSH_WAIT).await;
    }
    let filter = TraceFilter { notable: true, ..Default::default() };
    let list: Vec<TraceSummary> =
        match gateway.runtime.tool_store().traces_list(&filter, FAILING_CALLS).await {
            Ok(list) => list,
            Err(error) => {
                let _ = write!(
                    out,
                    "<p class=note>Cannot read the traces: {}</p>",
                    escape(&error.to_string())
                );
                return out;
            }
        };
    if list.is_empty() {
        out.push_str("<p class=muted>None kept.</p>");
        return out;
    }
    out.push_str(
        "<table><tr><th>when</th><th>route</th><th>outcome</th><th>tier</th><th class=n>attempts</th>\
         <th class=n>elapsed</th><th>trace</th></tr>",
    );
    for call in list {
        let _ = write!(
            out,
            "<tr data-call=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=n>{}</td>\
             <td class=n>{} ms</td><td><a class=id href=\"/traces/{}\">{}</a></td></tr>",
            escape(&call.request_id),
            when(call.at_unix_ms),
            escape(&call.route),
            escape(&call.outcome),
            escape(call.tier.as_deref().unwrap_or("—")),
            call.attempts,
            call.elapsed_ms,
            escape(&call.trace_id),
            escape(&call.trace_id),
        );
    }
    out.push_str("</table>");
    out
}

/// `GET /traces/{id}`: the kept calls of a trace id or request id, each as its timeline tree.
pub(super) async fn trace_page(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = refused(&gateway, &headers) {
        return refused;
    }
    let back = "<p><a href=/>← dashboard</a></p>";
    if id.is_empty()
        || id.len() > 128
        || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        let body = format!(
            "{back}<h1>Not a trace id</h1><p>A trace is named by its trace id or request id: \
             letters, digits and <code>_</code>, at most 128.</p>"
        );
        return html(StatusCode::BAD_REQUEST, "rein: not a trace id", &body);
    }
    if gateway.runtime.recorder.enabled() {
        gateway.runtime.recorder.flush(FLUSH_WAIT).await;
    }
    let traces = match gateway.runtime.tool_store().trace_get(&id).await {
        Ok(traces) => traces,
        Err(error) => {
            let body = format!(
                "{back}<h1>Trace store unavailable</h1><p class=note>{}</p>",
                escape(&error.to_string())
            );
            return html(StatusCode::SERVICE_UNAVAILABLE, "rein: trace store unavailable", &body);
        }
    };
    if traces.is_empty() {
        let body = format!(
            "{back}<h1>No kept trace <code>{}</code></h1><p>Only the newest traces, and for the \
             retention window every call not answered on the first try, are kept.</p>",
            escape(&id)
        );
        return html(StatusCode::NOT_FOUND, "rein: no such trace", &body);
    }
    let mut body = format!("{back}<h1>Trace <code>{}</code></h1>", escape(&id));
    for trace in &traces {
        let _ = write!(
            body,
            "<h2>{} {} <span class=muted>({})</span></h2><p class=muted>trace <code>{}</code> · \
             request <code>{}</code> · {}</p><pre data-trace=\"{}\">{}</pre>",
            escape(&trace.operation),
            escape(&trace.target),
            escape(&trace.outcome),
            escape(&trace.trace_id),
            escape(&trace.request_id),
            when(trace.started_unix_ms as i64),
            escape(&trace.trace_id),
            escape(&trace.render_tree()),
        );
    }
    let _ = write!(
        body,
        "<p class=muted>As JSON: <a href=\"/admin/traces/{}\">/admin/traces/{}</a></p>",
        escape(&id),
        escape(&id)
    );
    html(StatusCode::OK, &format!("rein: trace {id}"), &body)
}

// ---------------------------------------------------------------------------------------------
// Times

/// A wall-clock time in UTC, to the second.
fn when(unix_ms: i64) -> String {
    match time::OffsetDateTime::from_unix_timestamp(unix_ms.div_euclid(1000)) {
        Ok(at) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second()
        ),
        Err(_) => unix_ms.to_string(),
    }
}

/// A duration in milliseconds in its two largest units: `42s`, `5m 3s`, `2h 10m`, `3d 4h`.
fn age(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        3600..86_400 => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
        _ => format!("{}d {}h", secs / 86_400, secs % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_scales_read_as_an_operator_expects() {
        assert_eq!(when(0), "1970-01-01 00:00:00Z");
        assert_eq!(when(1_700_000_000_999), "2023-11-14 22:13:20Z");
        assert_eq!(age(999), "0s");
        assert_eq!(age(125_000), "2m 5s");
        assert_eq!(age(7_260_000), "2h 1m");
        assert_eq!(age(90_000_000), "1d 1h");
        assert_eq!(clock_span(Duration::from_secs(3600)), "1h");
        assert_eq!(clock_span(Duration::from_secs(1800)), "30m");
        assert_eq!(
            (round_up(0.0), round_up(1.5), round_up(260.0), round_up(5000.0)),
            (1.0, 2.0, 500.0, 5000.0)
        );
    }

    #[test]
    fn a_chart_breaks_its_line_where_a_bucket_had_no_calls_and_prints_the_latest_value() {
        let points = [Some(1.0), Some(0.5), None, Some(0.25), None];
        let svg = chart(
            "a<b",
            "availability",
            "availability",
            Scale::Share,
            "#000",
            &points,
            Duration::from_secs(3600),
        );
        assert_eq!(svg.matches("<polyline").count(), 1, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
        assert!(
            svg.contains("data-sli-latest=\"a&lt;b:availability\" data-value=\"0.25\">25.0%<"),
            "{svg}"
        );
        assert!(svg.contains(">100%<") && svg.contains(">−1h<") && svg.contains(">now<"), "{svg}");
        let empty = chart(
            "r",
            "latency_end_ms.p95",
            "latency p95",
            Scale::Millis,
            "#000",
            &[None, None],
            Duration::from_secs(3600),
        );
        assert!(!empty.contains("<polyline") && empty.contains("data-value=\"\">—<"), "{empty}");
    }
}
