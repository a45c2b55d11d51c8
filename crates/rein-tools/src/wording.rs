//! The `detail` sentence of an envelope: what happened, what the model may claim and what it can
//! still do. This wording is the steering surface ("Do not claim results are current" changes
//! what a model says; an error code does not), so each situation has a built-in default close to
//! the spec's, a per-tool override in `[tools.<name>.detail]`, and placeholders checked when the
//! config loads.
//!
//! Besides the fixed placeholders (`{tool}`, `{age}`, `{source}`, `{key}`, `{retry_after_ms}`,
//! `{reason}`), a template may name one of the call's top-level arguments as `{arg.NAME}`
//! (NAME: letters, digits, `_`, `-`), so a refusal can give the model a next step: with
//! `rejected_args = "No order {arg.order_id}. Ask the customer to check the number."` a lookup
//! of `{"order_id": "44718"}` that the backend answers 404 says `No order 44718. Ask the
//! customer to check the number.` Argument names are not known when the config loads, so any
//! well-formed name is accepted there. A string is inserted as it is, a number or a boolean as
//! its JSON text; a missing argument, `null`, an object, an array or a string with nothing
//! printable in it renders as `(unknown)`. The values come from the model, so each is cleaned
//! before it becomes steering text: line breaks, tabs and runs of whitespace become single
//! spaces, other control characters and invisible formatting characters (zero-width,
//! bidirectional overrides) are dropped, and what is left is cut to [`MAX_ARG_CHARS`] (200)
//! characters, the last one `…` when it was cut. An inserted value is never read as a template
//! itself: `{reason}` inside it stays as typed.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::config::DetailConfig;
use rein_core::problems::Problems;

/// Why an envelope needs a `detail` sentence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Situation {
    Exact,
    Fresh,
    Stale,
    Partial,
    Queued,
    Refused,
    RefusedWrite,
    UnknownOutcome,
    QueuedUnknown,
    HeldForReview,
    RejectedArgs,
    Busy,
    PendingApproval,
    Approved,
    Rejected,
    Failed,
    Replayed,
}

const PLACEHOLDERS: &[&str] = &["tool", "age", "source", "key", "retry_after_ms", "reason"];

/// The prefix of a placeholder naming one of the call's top-level arguments: `{arg.NAME}`.
const ARG_PREFIX: &str = "arg.";

/// The most characters of one argument a `detail` sentence carries.
pub(crate) const MAX_ARG_CHARS: usize = 200;

/// What `{arg.NAME}` renders as when the argument is missing or not a string, number or bool.
pub(crate) const UNKNOWN_ARG: &str = "(unknown)";

impl Situation {
    fn default_template(self) -> &'static str {
        match self {
            Situation::Exact => {
                "the primary {tool} is unavailable; this answer comes from {source}, which is authoritative."
            }
            Situation::Fresh => {
                "the primary {tool} is unavailable; these results are from {source}, a live replica that may lag slightly behind. Do not claim they reflect changes made in the last few moments."
            }
            Situation::Stale => {
                "live {tool} is unavailable; these results are from a cache captured {age} ago. They may not reflect changes since then. Do not claim results are current."
            }
            Situation::Partial => {
                "live {tool} is unavailable; this is a partial answer from {source}. It may be incomplete: do not claim it is complete or current, and say so if the user needs more."
            }
            Situation::Queued => {
                "{tool} is unavailable; the request is durably queued and will replay with the same idempotency key ({key}). It has NOT executed yet. Tell the user it is pending, not completed."
            }
            Situation::Refused => {
                "{tool} is unavailable and no fallback could answer. Nothing was returned: do not claim any result from it, and do not retry this call now; answer without it or ask the user."
            }
            Situation::RefusedWrite => {
                "{tool} is unavailable and the request could not be queued. It has NOT executed. Do not tell the user it is done; tell them it cannot be done right now."
            }
            Situation::UnknownOutcome => {
                "{tool} did not confirm the request: it may or may not have executed; rein will settle it with the same key ({key}). Do not tell the user it is done or that it failed; retrying with the same idempotency key is safe and will not repeat it."
            }
            Situation::QueuedUnknown => {
                "{tool} did not confirm the request: it may or may not have executed; rein will settle it with the same key ({key}). Do not tell the user it is done or that it failed; tell them it is being confirmed."
            }
            Situation::HeldForReview => {
                "{tool} did not confirm the request: it may or may not have executed. rein will not send it again until a person has checked whether it did (key {key}). Do not tell the user it is done or that it failed; tell them a person is confirming it."
            }
            Situation::RejectedArgs => {
                "{tool} rejected the arguments: {reason}. Nothing was returned or changed; fix the arguments or ask the user."
            }
            Situation::Busy => {
                "{tool} is at capacity right now, not down. Nothing ran; retry after {retry_after_ms} ms. Do not answer as if it returned a result."
            }
            Situation::PendingApproval => {
                "{tool} has NOT executed; a person must approve it first ({reason}). Tell the user it is waiting for approval, not done."
            }
            Situation::Approved => {
                "a person approved {tool}; it is queued and will run once with idempotency key {key}. It has NOT executed yet. Tell the user it is approved and pending, not completed."
            }
            Situation::Rejected => {
                "a person rejected {tool} ({reason}). It has NOT executed and will not. Tell the user it was not done."
            }
            Situation::Failed => {
                "{tool} refused the queued request: {reason}. It has NOT executed and will not be retried. Tell the user it was not done."
            }
            Situation::Replayed => "{tool} executed after being queued; this result is final.",
        }
    }
}

/// The values a template may use; a missing one renders as nothing (a missing argument as
/// [`UNKNOWN_ARG`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct Vars<'a> {
    pub tool: &'a str,
    pub age: Option<String>,
    pub source: Option<&'a str>,
    pub key: Option<&'a str>,
    pub retry_after_ms: Option<u64>,
    pub reason: Option<&'a str>,
    /// The call's arguments (a JSON object), for `{arg.NAME}`.
    pub args: Option<&'a Value>,
}

/// A tool's wording: its overrides over the defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct Wording {
    overrides: BTreeMap<Situation, String>,
}

impl Wording {
    /// Check and keep `detail`'s overrides (`key` is `tools.<name>.detail`).
    pub(crate) fn compile(detail: &DetailConfig, key: &str, problems: &mut Problems) -> Wording {
        let fields = [
            ("exact", Situation::Exact, &detail.exact),
            ("fresh", Situation::Fresh, &detail.fresh),
            ("stale", Situation::Stale, &detail.stale),
            ("partial", Situation::Partial, &detail.partial),
            ("queued", Situation::Queued, &detail.queued),
            ("refused", Situation::Refused, &detail.refused),
            ("refused_write", Situation::RefusedWrite, &detail.refused_write),
            ("unknown_outcome", Situation::UnknownOutcome, &detail.unknown_outcome),
            ("queued_unknown", Situation::QueuedUnknown, &detail.queued_unknown),
            ("held_for_review", Situation::HeldForReview, &detail.held_for_review),
            ("rejected_args", Situation::RejectedArgs, &detail.rejected_args),
            ("busy", Situation::Busy, &detail.busy),
            ("pending_approval", Situation::PendingApproval, &detail.pending_approval),
            ("approved", Situation::Approved, &detail.approved),
            ("rejected", Situation::Rejected, &detail.rejected),
            ("failed", Situation::Failed, &detail.failed),
            ("replayed", Situation::Replayed, &detail.replayed),
        ];
        let mut overrides = BTreeMap::new();
        for (field, situation, template) in fields {
            let Some(template) = template else { continue };
            match check_template(template) {
                Ok(()) => {
                    overrides.insert(situation, template.clone());
                }
                Err(message) => problems.add(format!("{key}.{field}"), message),
            }
        }
        Wording { overrides }
    }

    /// The sentence for `situation`.
    pub(crate) fn render(&self, situation: Situation, vars: &Vars<'_>) -> String {
        let template = self
            .overrides
            .get(&situation)
            .map_or_else(|| situation.default_template(), String::as_str);
        render(template, vars)
    }
}

fn check_template(template: &str) -> Result<(), String> {
    if template.trim().is_empty() {
        return Err("must not be empty: say what happened and what the model may claim".into());
    }
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(format!("has a `{{` without its `}}` (placeholders: {})", list()));
        };
        let name = &after[..close];
        if let Some(argument) = name.strip_prefix(ARG_PREFIX) {
            if !is_arg_name(argument) {
                return Err(format!(
                    "`{{{name}}}` does not name an argument: `{{arg.NAME}}` takes a top-level argument's name (letters, digits, _, -)"
                ));
            }
        } else if !PLACEHOLDERS.contains(&name) {
            return Err(format!("`{{{name}}}` is not a placeholder: use {}", list()));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

fn is_arg_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
}

fn list() -> String {
    let mut names: Vec<String> = PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
    names.push("{arg.NAME} (a top-level argument of the call)".into());
    names.join(", ")
}

fn render(template: &str, vars: &Vars<'_>) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            out.push_str(&rest[open..]);
            return out;
        };
        match &after[..close] {
            "tool" => out.push_str(vars.tool),
            "age" => out.push_str(vars.age.as_deref().unwrap_or_default()),
            "source" => out.push_str(vars.source.unwrap_or_default()),
            "key" => out.push_str(vars.key.unwrap_or_default()),
            "retry_after_ms" => {
                out.push_str(&vars.retry_after_ms.map(|ms| ms.to_string()).unwrap_or_default())
            }
            "reason" => out.push_str(vars.reason.unwrap_or_default()),
            other if other.starts_with(ARG_PREFIX) => {
                out.push_str(&argument(vars.args, &other[ARG_PREFIX.len()..]))
            }
            other => {
                out.push('{');
                out.push_str(other);
                out.push('}');
            }
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

/// The top-level argument `name` of `args` as a `detail` sentence may carry it: cleaned and
/// cut to [`MAX_ARG_CHARS`], or [`UNKNOWN_ARG`].
fn argument(args: Option<&Value>, name: &str) -> String {
    let text = match args.and_then(|args| args.get(name)) {
        Some(Value::String(text)) => clean(text),
        Some(value @ (Value::Number(_) | Value::Bool(_))) => value.to_string(),
        Some(Value::Null | Value::Array(_) | Value::Object(_)) | None => String::new(),
    };
    if text.is_empty() { UNKNOWN_ARG.to_string() } else { text }
}

/// `text` on one line: line breaks, tabs and every other run of whitespace become one space
/// (none at the ends), other control characters and invisible formatting characters go, and
/// the result is at most [`MAX_ARG_CHARS`] characters, ending in `…` when it was cut.
fn clean(text: &str) -> String {
    let visible: String = text
        .chars()
        .filter(|&c| c.is_whitespace() || !(c.is_control() || is_invisible(c)))
        .collect();
    let line = visible.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= MAX_ARG_CHARS {
        return line;
    }
    let mut cut: String = line.chars().take(MAX_ARG_CHARS - 1).collect();
    cut.truncate(cut.trim_end().len());
    cut.push('…');
    cut
}

/// Characters that render as nothing but can reorder or hide text: zero-width characters,
/// bidirectional embeddings, overrides and isolates, the byte order mark, soft hyphen, and
/// other format characters a model has no business putting in an argument shown to it.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{061C}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
    )
}

/// An age in words for people and models: "45 seconds", "12 minutes", "3.6 hours", "2.5 days".
pub(crate) fn human_age(age_ms: i64) -> String {
    let seconds = age_ms.max(0) / 1000;
    let plural = |n: i64, unit: &str| format!("{n} {unit}{}", if n == 1 { "" } else { "s" });
    if seconds < 60 {
        plural(seconds, "second")
    } else if seconds < 3600 {
        plural(seconds / 60, "minute")
    } else if seconds < 48 * 3600 {
        format!("{:.1} hours", seconds as f64 / 3600.0)
    } else {
        format!("{:.1} days", seconds as f64 / 86_400.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ages_read_like_the_spec() {
        assert_eq!(human_age(214 * 60_000 + 30_000), "3.6 hours");
        assert_eq!(human_age(45_000), "45 seconds");
        assert_eq!(human_age(1_000), "1 second");
        assert_eq!(human_age(61_000), "1 minute");
        assert_eq!(human_age(12 * 60_000), "12 minutes");
        assert_eq!(human_age(60 * 3_600_000), "2.5 days");
        assert_eq!(human_age(-5), "0 seconds");
    }

    #[test]
    fn overrides_replace_defaults_and_fill_placeholders() {
        let detail = DetailConfig {
            stale: Some("cache of {tool} from {age} ago via {source}".into()),
            ..DetailConfig::default()
        };
        let mut problems = Problems::default();
        let wording = Wording::compile(&detail, "tools.s.detail", &mut problems);
        assert!(problems.is_empty());
        let vars = Vars {
            tool: "search_docs",
            age: Some("3.6 hours".into()),
            source: Some("search_cache"),
            ..Vars::default()
        };
        assert_eq!(
            wording.render(Situation::Stale, &vars),
            "cache of search_docs from 3.6 hours ago via search_cache"
        );
        let default = wording.render(Situation::Busy, &Vars { retry_after_ms: Some(250), ..vars });
        assert!(default.contains("retry after 250 ms"), "{default}");
    }

    #[test]
    fn arguments_fill_their_placeholders_cleaned_and_cut() {
        let detail = DetailConfig {
            rejected_args: Some("No order {arg.order_id}. Ask the customer ({arg.who}).".into()),
            ..DetailConfig::default()
        };
        let mut problems = Problems::default();
        let wording = Wording::compile(&detail, "tools.o.detail", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let render = |args: Value| {
            let vars = Vars { tool: "look_up_order", args: Some(&args), ..Vars::default() };
            wording.render(Situation::RejectedArgs, &vars)
        };
        let said = |order: &str, who: &str| format!("No order {order}. Ask the customer ({who}).");
        assert_eq!(render(json!({"order_id": "44718", "who": "Ann"})), said("44718", "Ann"));
        assert_eq!(render(json!({"order_id": 44718, "who": true})), said("44718", "true"));
        assert_eq!(render(json!({"order_id": 4.5})), said("4.5", "(unknown)"));
        assert_eq!(
            render(json!({"order_id": null, "who": {"name": "Ann"}})),
            said("(unknown)", "(unknown)")
        );
        assert_eq!(
            render(json!({"order_id": [1], "who": "\n\u{200b}"})),
            said("(unknown)", "(unknown)")
        );
        assert_eq!(
            render(json!({"order_id": " 447\u{0}18\r\n\u{85}x\u{2029}", "who": "A\u{2066}nn"})),
            said("44718 x", "Ann")
        );
        // Multi-byte characters are counted as characters, never split.
        let cut = render(json!({"order_id": "é".repeat(300)}));
        assert_eq!(cut, said(&format!("{}…", "é".repeat(MAX_ARG_CHARS - 1)), "(unknown)"));
        // A cut never leaves a space before its ellipsis.
        let word = "a".repeat(MAX_ARG_CHARS - 2);
        let cut = render(json!({"order_id": format!("{word}  bcd")}));
        assert_eq!(cut, said(&format!("{word}…"), "(unknown)"));
        let fits = "b".repeat(MAX_ARG_CHARS);
        assert_eq!(render(json!({ "order_id": fits })), said(&fits, "(unknown)"));
        // Without arguments at hand every argument is unknown.
        let vars = Vars { tool: "look_up_order", ..Vars::default() };
        assert_eq!(wording.render(Situation::RejectedArgs, &vars), said("(unknown)", "(unknown)"));
    }

    #[test]
    fn argument_placeholders_are_checked_for_form_only() {
        for ok in ["{arg.order_id}", "{arg.x}", "{arg.Order-ID_2} for {tool}"] {
            assert_eq!(check_template(ok), Ok(()), "{ok}");
        }
        for bad in ["{arg.}", "{arg.order.id}", "{arg.order id}", "{arg}", "{args.x}", "{nope}"] {
            assert!(check_template(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn unknown_placeholders_are_named_by_key() {
        let detail = DetailConfig {
            stale: Some("captured {when}".into()),
            queued: Some("key {key".into()),
            ..DetailConfig::default()
        };
        let mut problems = Problems::default();
        Wording::compile(&detail, "tools.s.detail", &mut problems);
        assert_eq!(problems.keys(), ["tools.s.detail.stale", "tools.s.detail.queued"]);
    }
}
