//! `rein traces` and `rein sli`: what a running gateway recorded, through its admin API.
//! `traces list` prints the kept traces, newest first (when, route, outcome, tier, attempts,
//! time, trace id); `traces show ID` (a trace id or a request id) prints one call's timeline as
//! a tree: each attempt with the clock that fired and the move decided, each wait, tier skip,
//! check and verdict. `sli --window 1h` prints the SLIs of the calls in the window per route,
//! tier and label. `--json` prints the admin API's answer as is.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::admin;

#[derive(Debug, Args)]
pub(crate) struct TracesArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    #[command(subcommand)]
    action: TracesAction,
}

#[derive(Debug, Subcommand)]
enum TracesAction {
    /// Kept traces, newest first.
    List {
        #[arg(long)]
        route: Option<String>,
        /// Only this outcome (answered, fallback, degraded, ...).
        #[arg(long)]
        outcome: Option<String>,
        /// Only calls not answered on the first try.
        #[arg(long)]
        notable: bool,
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// One call's timeline, by trace id or request id.
    Show { id: String },
}

#[derive(Debug, Args)]
pub(crate) struct SliArgs {
    #[command(flatten)]
    flags: admin::AdminFlags,
    /// The window: 90s, 15m, 1h, 7d.
    #[arg(long, default_value = "1h")]
    window: String,
    /// Only this route.
    #[arg(long)]
    route: Option<String>,
}

/// `?key=value&...` of the pairs that are set, each value percent-encoded.
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let encoded: Vec<String> = pairs
        .iter()
        .filter_map(|(key, value)| value.as_ref().map(|value| (key, value)))
        .map(|(key, value)| {
            let value: String = value
                .bytes()
                .map(|b| match b {
                    b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                        char::from(b).to_string()
                    }
                    _ => format!("%{b:02X}"),
                })
                .collect();
            format!("{key}={value}")
        })
        .collect();
    if encoded.is_empty() { String::new() } else { format!("?{}", encoded.join("&")) }
}

pub(crate) async fn run(args: TracesArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let request = match &args.action {
        TracesAction::List { route, outcome, notable, limit } => {
            let q = query(&[
                ("route", route.clone()),
                ("outcome", outcome.clone()),
                ("notable", notable.then(|| "true".to_string())),
                ("limit", Some(limit.to_string())),
            ]);
            admin.get(&format!("/admin/traces{q}"))
        }
        TracesAction::Show { id } => {
            let id: String =
                id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            admin.get(&format!("/admin/traces/{id}"))
        }
    };
    let (status, body) = admin.send(request).await?;
    match (&args.action, args.flags.json) {
        (TracesAction::List { .. }, false) => admin::print(status, &body, write_list),
        (TracesAction::Show { .. }, false) => admin::print(status, &body, write_tree),
        _ => admin::print(status, &body, admin::json),
    }
}

pub(crate) async fn sli(args: SliArgs) -> anyhow::Result<std::process::ExitCode> {
    let admin = args.flags.admin()?;
    let q = query(&[("window", Some(args.window.clone())), ("route", args.route.clone())]);
    let (status, body) = admin.send(admin.get(&format!("/admin/sli{q}"))).await?;
    if args.flags.json {
        admin::print(status, &body, admin::json)
    } else {
        admin::print(status, &body, write_slis)
    }
}

fn text(value: &Value, field: &str) -> String {
    match value.get(field) {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Null) | None => "-".to_string(),
        Some(other) => other.to_string(),
    }
}

/// Unix milliseconds as UTC `YYYY-MM-DD HH:MM:SS`.
pub(crate) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

fn write_list(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    let traces = body.get("traces").and_then(Value::as_array).cloned().unwrap_or_default();
    writeln!(
        out,
        "{:<19}  {:<14}  {:<11}  {:<12}  {:>8}  {:>8}  {:<32}  REQUEST",
        "WHEN (UTC)", "ROUTE / TOOL", "OUTCOME", "TIER / RUNG", "ATTEMPTS", "MS", "TRACE"
    )?;
    for trace in &traces {
        let number = |field: &str| trace.get(field).and_then(Value::as_i64).unwrap_or(0);
        // A tool call's row names its tool, and its attempts are the rungs that ran.
        let target = match trace.get("kind").and_then(Value::as_str) {
            Some("tool") => format!("tool:{}", text(trace, "route")),
            _ => text(trace, "route"),
        };
        writeln!(
            out,
            "{:<19}  {:<14}  {:<11}  {:<12}  {:>8}  {:>8}  {:<32}  {}",
            utc(number("at_unix_ms")),
            target,
            text(trace, "outcome"),
            text(trace, "tier"),
            number("attempts"),
            number("elapsed_ms"),
            text(trace, "trace_id"),
            text(trace, "request_id"),
        )?;
    }
    writeln!(out, "{} shown", traces.len())
}

fn write_tree(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    for call in body.get("calls").and_then(Value::as_array).cloned().unwrap_or_default() {
        write!(out, "{}", call.get("tree").and_then(Value::as_str).unwrap_or_default())?;
    }
    Ok(())
}

fn percent(value: Option<&Value>) -> String {
    value.and_then(Value::as_f64).map_or_else(|| "-".to_string(), |v| format!("{:.1}%", v * 100.0))
}

fn write_slis(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "window {}: {} call(s){}",
        text(body, "window"),
        body.get("calls").and_then(Value::as_u64).unwrap_or(0),
        if body.get("truncated").and_then(Value::as_bool) == Some(true) {
            " (truncated: the oldest calls were not read)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "{:<34}  {:>6}  {:>7}  {:>12}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}  ESCALATIONS",
        "SLICE",
        "CALLS",
        "AVAIL",
        "P50/P95 MS",
        "VALID1",
        "1ST TRY",
        "RETRIED",
        "FALLBACK",
        "DEGRADED"
    )?;
    for slice in body.get("slices").and_then(Value::as_array).cloned().unwrap_or_default() {
        let name = match slice.get("slice").and_then(Value::as_str) {
            Some("route") => text(&slice, "route"),
            Some("tier") => format!("{} tier={}", text(&slice, "route"), text(&slice, "tier")),
            Some("label") => format!(
                "{} {}={}",
                text(&slice, "route"),
                text(&slice, "key"),
                text(&slice, "value")
            ),
            _ => "-".to_string(),
        };
        let latency = slice
            .get("latency_end_ms")
            .filter(|v| !v.is_null())
            .map_or_else(|| "-".to_string(), |p| format!("{}/{}", text(p, "p50"), text(p, "p95")));
        let escalations = slice
            .get("escalation_rate")
            .and_then(Value::as_object)
            .map(|rates| {
                rates
                    .iter()
                    .map(|(trigger, rate)| format!("{trigger}={}", percent(Some(rate))))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default();
        writeln!(
            out,
            "{:<34}  {:>6}  {:>7}  {:>12}  {:>7}  {:>8}  {:>8}  {:>8}  {:>8}  {}",
            name,
            slice.get("calls").and_then(Value::as_u64).unwrap_or(0),
            percent(slice.get("availability")),
            latency,
            percent(slice.get("valid_first_try")),
            percent(slice.get("success_first_try")),
            percent(slice.get("success_after_retries")),
            percent(slice.get("fallback_beyond_plan")),
            percent(slice.get("degraded_share")),
            escalations,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_encodes_values_and_skips_unset_ones() {
        assert_eq!(query(&[("a", None)]), "");
        let q = query(&[("window", Some("1h".into())), ("route", Some("a b&c".into()))]);
        assert_eq!(q, "?window=1h&route=a%20b%26c");
    }

    #[test]
    fn utc_prints_the_civil_time() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_796_083_200_000), "2026-12-01 00:00:00");
        assert_eq!(utc(951_786_123_000), "2000-02-29 01:02:03");
    }
}
