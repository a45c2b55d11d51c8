//! The config of escalation and of what runs may spend: `[handoffs]` (the hand-off tool that
//! makes the ticket, the trace link, canary drafts, the reviewers' edit-rate floor), `[prices]`
//! (dollars per million tokens, per model), and per route the hand-off rules, the coverage
//! check, the reply a handed-off customer gets, the limits that override `[runs]`, and the
//! degraded mode's rules that act without a model. Raw sections as written, validated into the
//! types the runtime runs.

use std::collections::BTreeMap;

use rein_core::DegradedReply;
use rein_core::coverage::CoverageCheck;
use rein_core::handoff::HandoffRules;
use rein_core::problems::Problems;
use rein_core::run::ModelPrice;
use rein_core::validate::EvidenceItem;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `[handoffs]` as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RawHandoffs {
    /// The write tool that makes the ticket (`kind = "write"`, `key_from = "conversation"`):
    /// its ladder delivers every packet, so one conversation yields one ticket. Absent: packets
    /// are kept in the store only.
    pub tool: Option<String>,
    /// The call's trace, for the packet: `{trace_id}`, `{run_id}`, `{conversation_id}`,
    /// `{request_id}`. Absent: the gateway's own `/admin/traces/{trace_id}`.
    pub trace_url: Option<String>,
    /// The share of hand-offs (0 to 1) after which a canary draft joins the queue.
    pub canary_rate: f64,
    /// Drafts known to be wrong, mixed into the queue; only the store marks them.
    pub canaries: Vec<RawCanary>,
    /// An edit rate under this, over at least `edit_rate_min_decided` decisions, is flagged.
    pub edit_rate_floor: f64,
    pub edit_rate_min_decided: u32,
}

impl Default for RawHandoffs {
    fn default() -> Self {
        Self {
            tool: None,
            trace_url: None,
            canary_rate: 0.0,
            canaries: Vec::new(),
            edit_rate_floor: 0.05,
            edit_rate_min_decided: 20,
        }
    }
}

/// One canary draft.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawCanary {
    pub message: String,
    pub draft: String,
    #[serde(default)]
    pub evidence: Vec<EvidenceItem>,
    /// The trigger it poses as (default `coverage`).
    #[serde(default)]
    pub trigger: Option<String>,
}

/// `[handoffs]`, validated.
#[derive(Debug, Clone, Serialize)]
pub struct HandoffsConfig {
    pub tool: Option<String>,
    pub trace_url: Option<String>,
    pub canary_rate: f64,
    pub canaries: Vec<Canary>,
    pub edit_rate_floor: f64,
    pub edit_rate_min_decided: u32,
}

/// A canary draft, validated.
#[derive(Debug, Clone, Serialize)]
pub struct Canary {
    pub message: String,
    pub draft: String,
    pub evidence: Vec<EvidenceItem>,
    pub trigger: rein_core::handoff::Trigger,
}

/// Per route, `[routes.<name>.runs]`: the limits of `[runs]` this route's calls are held to
/// instead.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawRouteRuns {
    pub max_model_calls: Option<u32>,
    pub deadline_ms: Option<u64>,
    pub max_spend_usd: Option<f64>,
}

/// `[runs.tools.<name>]`: one tool's own limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolLimits {
    pub max_same_call: Option<u32>,
    pub max_same_error: Option<u32>,
}

/// `[[routes.<name>.degraded_rules]]` as written: when every model tier is down, what rein
/// does itself.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RawDegradedRule {
    pub name: String,
    /// A regular expression on the customer's message; its named groups fill `args` and the
    /// template. Absent: every message (the last rule, "a person will reply").
    #[serde(default)]
    pub pattern: Option<String>,
    /// The tool to call through its ladder.
    #[serde(default)]
    pub tool: Option<String>,
    /// The tool's arguments: strings with `{group}` and `{message}` filled in.
    #[serde(default)]
    pub args: Map<String, Value>,
    /// The reply: `{{group}}`, `{{message}}`, and `{{path.to.field}}` into the tool's result
    /// (`{{results.0.url}}`). A placeholder with no value fails the rule (the next one runs).
    pub template: String,
    /// Also send the conversation to a person (in the background).
    #[serde(default)]
    pub handoff: bool,
}

/// A degraded rule, validated (its pattern compiled).
#[derive(Debug, Clone, Serialize)]
pub struct DegradedRule {
    pub name: String,
    pub pattern: Option<String>,
    #[serde(skip)]
    pub regex: Option<regex::Regex>,
    pub tool: Option<String>,
    pub args: Map<String, Value>,
    pub template: String,
    pub handoff: bool,
}

/// A route's escalation settings, validated.
#[derive(Debug, Clone, Serialize)]
pub struct RouteEscalation {
    pub rules: HandoffRules,
    pub coverage: Option<CoverageCheck>,
    /// What a customer whose conversation went to a person is told.
    pub handoff_reply: Option<DegradedReply>,
    pub max_model_calls: Option<u32>,
    #[serde(with = "opt_millis")]
    pub deadline: Option<std::time::Duration>,
    pub max_spend_micro_usd: Option<u64>,
    pub degraded_rules: Vec<DegradedRule>,
}

impl Default for RouteEscalation {
    fn default() -> Self {
        Self {
            rules: HandoffRules::off(),
            coverage: None,
            handoff_reply: None,
            max_model_calls: None,
            deadline: None,
            max_spend_micro_usd: None,
            degraded_rules: Vec::new(),
        }
    }
}

impl RouteEscalation {
    /// Whether anything runs before a call on this route (hand-off rules, the coverage check).
    pub fn acts_before_call(&self) -> bool {
        self.coverage.is_some() || self.rules != HandoffRules::off()
    }
}

mod opt_millis {
    use serde::Serializer;

    pub(super) fn serialize<S: Serializer>(
        value: &Option<std::time::Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => serializer.serialize_some(&(d.as_millis() as u64)),
            None => serializer.serialize_none(),
        }
    }
}

/// Dollars to millionths of a dollar; `None` for a negative or non-finite amount.
pub fn micro_usd(dollars: f64) -> Option<u64> {
    (dollars.is_finite() && dollars >= 0.0).then(|| (dollars * 1_000_000.0).round() as u64)
}

/// Validate `[handoffs]` against the tools as written.
pub(super) fn validate_handoffs(
    raw: &RawHandoffs,
    tools: &rein_tools::ToolsConfig,
    problems: &mut Problems,
) -> HandoffsConfig {
    if let Some(tool) = &raw.tool {
        match tools.tools.get(tool) {
            None => problems.add("handoffs.tool", format!("`{tool}` is not a configured tool")),
            Some(config) => {
                if config.kind != rein_tools::config::ToolKind::Write {
                    problems.add(
                        "handoffs.tool",
                        format!("`{tool}` must be a write tool (`kind = \"write\"`): a ticket is a write"),
                    );
                }
                if config.key_from != Some(rein_tools::config::KeyFrom::Conversation) {
                    problems.add(
                        "handoffs.tool",
                        format!("`{tool}` needs `key_from = \"conversation\"`, so one conversation makes one ticket whoever retries it"),
                    );
                }
            }
        }
    }
    if !(0.0..=1.0).contains(&raw.canary_rate) {
        problems.add("handoffs.canary_rate", "must be between 0 and 1");
    }
    if raw.canary_rate > 0.0 && raw.canaries.is_empty() {
        problems.add("handoffs.canaries", "a canary_rate above 0 needs at least one canary draft");
    }
    if !(0.0..=1.0).contains(&raw.edit_rate_floor) {
        problems.add("handoffs.edit_rate_floor", "must be between 0 and 1");
    }
    let canaries = raw
        .canaries
        .iter()
        .enumerate()
        .filter_map(|(n, canary)| {
            let name = canary.trigger.as_deref().unwrap_or("coverage");
            match rein_core::handoff::Trigger::parse(name) {
                Some(trigger) => Some(Canary {
                    message: canary.message.clone(),
                    draft: canary.draft.clone(),
                    evidence: canary.evidence.clone(),
                    trigger,
                }),
                None => {
                    problems.add(
                        format!("handoffs.canaries[{n}].trigger"),
                        format!("`{name}` is not a trigger (handoff_rule, coverage, checks_failed, stop_condition, gate, degraded)"),
                    );
                    None
                }
            }
        })
        .collect();
    HandoffsConfig {
        tool: raw.tool.clone(),
        trace_url: raw.trace_url.clone(),
        canary_rate: raw.canary_rate,
        canaries,
        edit_rate_floor: raw.edit_rate_floor,
        edit_rate_min_decided: raw.edit_rate_min_decided,
    }
}

/// Validate `[prices]`.
pub(super) fn validate_prices(
    raw: &BTreeMap<String, ModelPrice>,
    problems: &mut Problems,
) -> BTreeMap<String, ModelPrice> {
    for (model, price) in raw {
        for (field, value) in
            [("input_per_mtok", price.input_per_mtok), ("output_per_mtok", price.output_per_mtok)]
        {
            if !value.is_finite() || value < 0.0 {
                problems.add(format!("prices.{model}.{field}"), "must be a price of 0 or more");
            }
        }
    }
    raw.clone()
}

/// The escalation parts of one route as written.
pub(super) struct RawRouteEscalation<'a> {
    pub handoff_rules: Option<&'a HandoffRules>,
    pub coverage: Option<&'a CoverageCheck>,
    pub handoff_reply: Option<DegradedReply>,
    pub runs: Option<&'a RawRouteRuns>,
    pub degraded_rules: &'a [RawDegradedRule],
}

/// Validate one route's escalation settings. `routes`: every route's name (the coverage check
/// names one); `tools`: the tools as written.
pub(super) fn validate_route_escalation(
    name: &str,
    raw: RawRouteEscalation<'_>,
    routes: &[&str],
    tools: &rein_tools::ToolsConfig,
    problems: &mut Problems,
) -> RouteEscalation {
    let key = |field: &str| format!("routes.{name}.{field}");
    if let Some(coverage) = raw.coverage {
        if coverage.route.is_empty() {
            problems.add(
                key("coverage.route"),
                "is required: the route of the small model that judges coverage",
            );
        } else if coverage.route == name {
            problems.add(
                key("coverage.route"),
                "must name another route (the check would check itself)",
            );
        } else if !routes.contains(&coverage.route.as_str()) {
            problems.add(key("coverage.route"), format!("`{}` is not a route", coverage.route));
        }
        if !(0.0..=1.0).contains(&coverage.cutoff) {
            problems.add(key("coverage.cutoff"), "must be between 0 and 1");
        }
        if coverage.samples == 0 || coverage.samples > 20 {
            problems.add(key("coverage.samples"), "must be between 1 and 20");
        }
    }
    let hands_off = raw.handoff_rules.is_some() || raw.coverage.is_some();
    if hands_off && raw.handoff_reply.is_none() {
        problems.add(
            key("handoff_reply"),
            "is required with handoff_rules or coverage: what the customer is told when a person takes over (rein never makes up a promise)",
        );
    }
    let mut max_spend_micro_usd = None;
    let (mut max_model_calls, mut deadline) = (None, None);
    if let Some(runs) = raw.runs {
        if runs.max_model_calls == Some(0) {
            problems.add(key("runs.max_model_calls"), "must be at least 1");
        }
        if runs.deadline_ms == Some(0) {
            problems.add(key("runs.deadline_ms"), "must be greater than 0");
        }
        max_model_calls = runs.max_model_calls;
        deadline = runs.deadline_ms.map(std::time::Duration::from_millis);
        if let Some(dollars) = runs.max_spend_usd {
            max_spend_micro_usd = micro_usd(dollars);
            if max_spend_micro_usd.is_none() {
                problems.add(key("runs.max_spend_usd"), "must be an amount of 0 or more");
            }
        }
    }
    let degraded_rules = raw
        .degraded_rules
        .iter()
        .enumerate()
        .filter_map(|(n, rule)| degraded_rule(name, n, rule, tools, problems))
        .collect();
    RouteEscalation {
        rules: raw.handoff_rules.cloned().unwrap_or_else(HandoffRules::off),
        coverage: raw.coverage.cloned(),
        handoff_reply: raw.handoff_reply,
        max_model_calls,
        deadline,
        max_spend_micro_usd,
        degraded_rules,
    }
}

fn degraded_rule(
    route: &str,
    n: usize,
    rule: &RawDegradedRule,
    tools: &rein_tools::ToolsConfig,
    problems: &mut Problems,
) -> Option<DegradedRule> {
    let key = |field: &str| format!("routes.{route}.degraded_rules[{n}].{field}");
    let before = problems.len();
    let regex = match &rule.pattern {
        Some(pattern) => match regex::RegexBuilder::new(pattern).size_limit(1 << 20).build() {
            Ok(regex) => Some(regex),
            Err(error) => {
                problems.add(key("pattern"), format!("is not a regular expression: {error}"));
                None
            }
        },
        None => None,
    };
    if let Some(tool) = &rule.tool {
        match tools.tools.get(tool) {
            None => problems.add(key("tool"), format!("`{tool}` is not a configured tool")),
            Some(config) if config.kind != rein_tools::config::ToolKind::Read => problems
                .add(key("tool"), format!("`{tool}` is a write: a degraded reply only reads")),
            Some(_) => {}
        }
    } else if !rule.args.is_empty() {
        problems.add(key("args"), "needs `tool`: the arguments are the tool's");
    }
    if rule.template.trim().is_empty() {
        problems.add(key("template"), "is required: the reply, decided in advance");
    }
    if let Some(regex) = &regex {
        let groups: Vec<&str> = regex.capture_names().flatten().collect();
        for (field, value) in &rule.args {
            let Value::String(text) = value else { continue };
            for placeholder in single_placeholders(text) {
                if placeholder != "message" && !groups.contains(&placeholder.as_str()) {
                    problems.add(
                        key(&format!("args.{field}")),
                        format!("`{{{placeholder}}}` is not a named group of the pattern (nor `message`)"),
                    );
                }
            }
        }
    }
    (problems.len() == before).then(|| DegradedRule {
        name: rule.name.clone(),
        pattern: rule.pattern.clone(),
        regex,
        tool: rule.tool.clone(),
        args: rule.args.clone(),
        template: rule.template.clone(),
        handoff: rule.handoff,
    })
}

/// The `{name}` placeholders of a string (not `{{name}}`).
pub fn single_placeholders(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('{') {
        let after = &rest[start + 1..];
        if after.starts_with('{') {
            rest = after.trim_start_matches('{');
            continue;
        }
        match after.find('}') {
            Some(end) => {
                found.push(after[..end].to_string());
                rest = &after[end + 1..];
            }
            None => break,
        }
    }
    found
}
