//! The `detail` sentence of an envelope: what happened, what the model may claim and what it can
//! still do. This wording is the steering surface ("Do not claim results are current" changes
//! what a model says; an error code does not), so each situation has a built-in default close to
//! the spec's, a per-tool override in `[tools.<name>.detail]`, and placeholders checked when the
//! config loads.

use std::collections::BTreeMap;

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
                "{tool} is unavailable and no fallback could answer. Nothing was returned: do not claim any result from it; answer without it or ask the user."
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

/// The values a template may use; a missing one renders as nothing.
#[derive(Debug, Default, Clone)]
pub(crate) struct Vars<'a> {
    pub tool: &'a str,
    pub age: Option<String>,
    pub source: Option<&'a str>,
    pub key: Option<&'a str>,
    pub retry_after_ms: Option<u64>,
    pub reason: Option<&'a str>,
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
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!("`{{{name}}}` is not a placeholder: use {}", list()));
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

fn list() -> String {
    PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect::<Vec<_>>().join(", ")
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
