//! `[routes.<name>.output]`: a route's output contract (the validation ladder), validated into
//! [`OutputConfig`]. The JSON Schema is compiled here, once, so a schema that does not compile
//! (or a `schema_file` that cannot be read) is a config error naming the key, not a surprise on
//! the first answer. Rules and fail-open selectors are checked against each other: a selector
//! must name a problem this route can have, and a rule that reads the answer's JSON needs a
//! route that expects JSON.

use std::time::Duration;

use rein_core::validate::{BuiltinRule, CompiledSchema, Condition, ProblemKindSelector};
use serde::Serialize;
use serde_json::Value;

use super::raw::{RawOutput, RawTier, RawWebhook};
use rein_core::problems::Problems;

/// The default for `max_tokens_cap`, as `rein_core::Route::new` has it.
pub const DEFAULT_MAX_TOKENS_CAP: u32 = 8192;

/// How long a webhook check may take when `timeout_ms` is not given.
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: u64 = 1000;

/// A route's validated output contract.
#[derive(Debug, Clone, Serialize)]
pub struct OutputConfig {
    /// The answer must be JSON (true whenever there is a schema).
    pub json: bool,
    /// The JSON Schema as written inline or read from `schema_file`.
    pub schema: Option<Value>,
    /// Where the schema was read from, when it came from a file.
    pub schema_file: Option<String>,
    /// The schema, compiled once for every answer on the route.
    #[serde(skip)]
    pub compiled_schema: Option<CompiledSchema>,
    pub max_tokens_cap: u32,
    /// Built-in rules, in config order.
    pub rules: Vec<BuiltinRule>,
    /// Webhook rules, in config order, run after the built-in ones.
    pub webhooks: Vec<WebhookConfig>,
    pub fail_open: Vec<ProblemKindSelector>,
    /// The judge route, and whether its "not supported" fails the answer.
    pub judge: Option<(String, bool)>,
}

/// A business rule behind an HTTP endpoint (see `crate::webhook`).
#[derive(Debug, Clone, Serialize)]
pub struct WebhookConfig {
    pub name: String,
    /// An `http://` or `https://` URL without credentials (shown by `rein check`).
    pub url: String,
    #[serde(rename = "timeout_ms", with = "rein_core::clock::millis")]
    pub timeout: Duration,
}

/// The names of every built-in rule, which a webhook may not take.
const BUILTIN_NAMES: &[&str] =
    &["cited_ids_returned", "numbers_in_cited_text", "id_matches_tool", "flag_required_when"];

/// Validate a route's `output` table. `deadline` is the route's, for webhook timeouts; `tiers`
/// for their `max_tokens` against `max_tokens_cap`.
pub(super) fn validate_output(
    route: &str,
    raw: &RawOutput,
    tiers: &[RawTier],
    deadline: Duration,
    problems: &mut Problems,
) -> Option<OutputConfig> {
    let key = |field: &str| format!("routes.{route}.output.{field}");
    let before = problems.len();

    let (schema, compiled_schema) = schema_of(raw, &key, problems);
    // Whether a schema was given, compiled or not: later checks judge what the author meant.
    let has_schema = raw.schema.is_some() || raw.schema_file.is_some();
    if raw.json == Some(false) && has_schema {
        problems.add(
            key("json"),
            "is false, but a schema is given and a schema means a JSON answer: remove `json = false`",
        );
    }
    let json = raw.json.unwrap_or(false) || has_schema;

    let max_tokens_cap = raw.max_tokens_cap.unwrap_or(DEFAULT_MAX_TOKENS_CAP);
    if max_tokens_cap == 0 {
        problems.add(key("max_tokens_cap"), "must be greater than 0");
    }
    for (index, tier) in tiers.iter().enumerate() {
        if let Some(max_tokens) = tier.max_tokens
            && max_tokens > max_tokens_cap
            && max_tokens_cap > 0
        {
            problems.add(
                key("max_tokens_cap"),
                format!(
                    "({max_tokens_cap}) is less than `routes.{route}.tiers[{index}].max_tokens` ({max_tokens}): a cut-off answer could never be asked again with a higher ceiling; raise the cap"
                ),
            );
        }
    }

    for (index, rule) in raw.rules.iter().enumerate() {
        check_rule(rule, &key(&format!("rules[{index}]")), json, problems);
    }

    let mut webhooks = Vec::new();
    for (index, webhook) in raw.webhooks.iter().enumerate() {
        let webhook_key = |field: &str| key(&format!("webhooks[{index}].{field}"));
        if raw.webhooks[..index].iter().any(|earlier| earlier.name == webhook.name) {
            problems.add(
                webhook_key("name"),
                format!("`{}` is used by an earlier webhook of this route", webhook.name),
            );
        }
        if let Some(config) = check_webhook(webhook, &webhook_key, deadline, problems) {
            webhooks.push(config);
        }
    }

    for (index, selector) in raw.fail_open.iter().enumerate() {
        check_selector(selector, &key(&format!("fail_open[{index}]")), raw, problems);
    }

    (problems.len() == before).then(|| OutputConfig {
        json,
        schema,
        schema_file: raw.schema_file.clone(),
        compiled_schema,
        max_tokens_cap,
        rules: raw.rules.clone(),
        webhooks,
        fail_open: raw.fail_open.clone(),
        judge: raw.judge.as_ref().map(|j| (j.route.clone(), j.fail)),
    })
}

/// The schema as written (inline, or read from `schema_file`) and compiled.
fn schema_of(
    raw: &RawOutput,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> (Option<Value>, Option<CompiledSchema>) {
    let (field, source) = match (&raw.schema, &raw.schema_file) {
        (None, None) => return (None, None),
        (Some(_), Some(_)) => {
            problems.add(
                key("schema_file"),
                "is given together with `schema`: give the JSON Schema one way, inline or in a file",
            );
            return (None, None);
        }
        (Some(schema), None) => {
            if !schema.is_object() {
                problems.add(key("schema"), "must be a table (a JSON Schema object)");
                return (None, None);
            }
            ("schema", schema.clone())
        }
        (None, Some(path)) => {
            let text = match std::fs::read_to_string(path) {
                Ok(text) => text,
                Err(error) => {
                    problems.add(
                        key("schema_file"),
                        format!(
                            "cannot read `{path}` (relative to the working directory): {error}"
                        ),
                    );
                    return (None, None);
                }
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(schema) if schema.is_object() => ("schema_file", schema),
                Ok(_) => {
                    problems.add(
                        key("schema_file"),
                        format!("`{path}` must hold a JSON object (a JSON Schema)"),
                    );
                    return (None, None);
                }
                Err(error) => {
                    problems.add(key("schema_file"), format!("`{path}` is not JSON: {error}"));
                    return (None, None);
                }
            }
        }
    };
    match CompiledSchema::new(&source) {
        Ok(compiled) => (Some(source), Some(compiled)),
        Err(error) => {
            let shown = match &raw.schema_file {
                Some(path) if field == "schema_file" => format!("`{path}`: {error}"),
                _ => error.to_string(),
            };
            problems.add(key(field), shown);
            (None, None)
        }
    }
}

/// A rule's pointers are JSON pointers, its names are not empty, and a rule that reads the
/// answer's JSON is on a route that expects JSON.
fn check_rule(rule: &BuiltinRule, key: &str, json: bool, problems: &mut Problems) {
    // (field, value, whether it points into the answer rather than evidence fields)
    let mut pointers: Vec<(&str, &str, bool)> = Vec::new();
    let mut names: Vec<(&str, &str)> = Vec::new();
    match rule {
        BuiltinRule::CitedIdsReturned(rule) => {
            pointers.push(("ids_at", &rule.ids_at, true));
            if let Some(source) = &rule.source {
                names.push(("source", source));
            }
            names.push(("item", &rule.item));
        }
        BuiltinRule::NumbersInCitedText(rule) => {
            if let Some(text_at) = &rule.text_at {
                pointers.push(("text_at", text_at, true));
            }
            if let Some(ids_at) = &rule.ids_at {
                pointers.push(("ids_at", ids_at, true));
            }
            names.push(("item", &rule.item));
        }
        BuiltinRule::IdMatchesTool(rule) => {
            pointers.push(("id_at", &rule.id_at, true));
            if let Some(field) = &rule.tool_field {
                pointers.push(("tool_field", field, false));
            }
            names.push(("tool", &rule.tool));
        }
        BuiltinRule::FlagRequiredWhen(rule) => {
            pointers.push(("flag_at", &rule.flag_at, true));
            match &rule.when {
                Condition::AnswerContainsAny { at, phrases } => {
                    if let Some(at) = at {
                        pointers.push(("when.at", at, true));
                    }
                    check_phrases(phrases, key, problems);
                }
                Condition::EvidenceContainsAny { source, phrases } => {
                    if let Some(source) = source {
                        names.push(("when.source", source));
                    }
                    check_phrases(phrases, key, problems);
                }
                Condition::EvidencePresent { source } | Condition::EvidenceAbsent { source } => {
                    names.push(("when.source", source));
                }
            }
        }
    }
    for (field, pointer, _) in &pointers {
        if !is_pointer(pointer) {
            problems.add(
                format!("{key}.{field}"),
                format!(
                    "`{pointer}` is not a JSON pointer: start it with `/` (e.g. `/article_ids`)"
                ),
            );
        }
    }
    if !json && let Some((field, pointer, _)) = pointers.iter().find(|(_, _, answer)| *answer) {
        problems.add(
            format!("{key}.{field}"),
            format!(
                "reads `{pointer}` of the answer's JSON, but the route does not expect JSON: set `json = true` or give a `schema`"
            ),
        );
    }
    for (field, value) in names {
        if value.trim().is_empty() {
            problems.add(format!("{key}.{field}"), "must not be empty");
        }
    }
}

fn check_phrases(phrases: &[String], key: &str, problems: &mut Problems) {
    if phrases.is_empty() {
        problems.add(format!("{key}.when.phrases"), "needs at least one phrase");
    }
    if let Some(index) = phrases.iter().position(|phrase| phrase.trim().is_empty()) {
        problems.add(format!("{key}.when.phrases[{index}]"), "must not be empty");
    }
}

fn check_webhook(
    raw: &RawWebhook,
    key: &dyn Fn(&str) -> String,
    deadline: Duration,
    problems: &mut Problems,
) -> Option<WebhookConfig> {
    let before = problems.len();
    if raw.name.is_empty()
        || !raw.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        problems.add(
            key("name"),
            format!(
                "`{}` must be letters, digits, `_` or `-` (it names the rule in problems and `fail_open`)",
                raw.name
            ),
        );
    } else if BUILTIN_NAMES.contains(&raw.name.as_str()) {
        problems.add(
            key("name"),
            format!("`{}` is the name of a built-in rule; choose another", raw.name),
        );
    }
    match reqwest::Url::parse(&raw.url) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => {
            problems.add(key("url"), format!("`{}` must start with http:// or https://", raw.url));
        }
        Ok(url) if !url.username().is_empty() || url.password().is_some() => {
            problems.add(
                key("url"),
                "must not carry a user or password: the config is printed by `rein check`, and rein takes secrets only from environment variables",
            );
        }
        Ok(_) => {}
        Err(error) => {
            problems.add(key("url"), format!("`{}` is not a URL: {error}", raw.url));
        }
    }
    let timeout_ms = raw.timeout_ms.unwrap_or(DEFAULT_WEBHOOK_TIMEOUT_MS);
    let timeout = Duration::from_millis(timeout_ms);
    if timeout_ms == 0 {
        problems.add(key("timeout_ms"), "must be greater than 0");
    } else if timeout >= deadline {
        problems.add(
            key("timeout_ms"),
            format!(
                "({timeout_ms}) is not less than the route's `deadline_ms` ({}): the check could never finish in time",
                deadline.as_millis()
            ),
        );
    }
    (problems.len() == before).then(|| WebhookConfig {
        name: raw.name.clone(),
        url: raw.url.clone(),
        timeout,
    })
}

/// A selector must name a problem this route can have.
fn check_selector(
    selector: &ProblemKindSelector,
    key: &str,
    raw: &RawOutput,
    problems: &mut Problems,
) {
    let kind = selector.kind.as_str();
    let (family, name) = match kind.split_once('/') {
        Some((family, name)) => (family, Some(name)),
        None => (kind, None),
    };
    let rule_names: Vec<&str> = raw
        .rules
        .iter()
        .map(|rule| -> &str { rule.rule_name() })
        .chain(raw.webhooks.iter().map(|webhook| webhook.name.as_str()))
        .collect();
    let webhook_names: Vec<&str> = raw.webhooks.iter().map(|w| w.name.as_str()).collect();
    let listed = |names: &[&str]| {
        let mut unique: Vec<&str> = Vec::new();
        for name in names {
            if !unique.contains(name) {
                unique.push(name);
            }
        }
        if unique.is_empty() { "none".to_string() } else { unique.join(", ") }
    };
    let kind_key = format!("{key}.kind");
    match (family, name) {
        ("not_json", _) => problems.add(
            kind_key,
            "a `not_json` problem never fails open: there is no JSON to use",
        ),
        (_, Some("")) => problems.add(kind_key, format!("`{kind}` has nothing after the `/`")),
        ("schema", _) if raw.schema.is_none() && raw.schema_file.is_none() => problems
            .add(kind_key, format!("`{kind}` selects schema problems, but the route has no `schema`")),
        ("schema", _) => {}
        ("rule", None) if rule_names.is_empty() => {
            problems.add(kind_key, "`rule` selects rule problems, but the route has no rules")
        }
        ("rule", Some(rule)) if !rule_names.contains(&rule) => problems.add(
            kind_key,
            format!("`{rule}` is not a rule of this route (its rules: {})", listed(&rule_names)),
        ),
        ("rule", _) => {}
        ("rule_unavailable", None) if webhook_names.is_empty() => problems.add(
            kind_key,
            "`rule_unavailable` selects webhooks that could not run, but the route has no webhooks",
        ),
        ("rule_unavailable", Some(webhook)) if !webhook_names.contains(&webhook) => problems.add(
            kind_key,
            format!(
                "`{webhook}` is not a webhook of this route (only webhooks can be unavailable; its webhooks: {})",
                listed(&webhook_names)
            ),
        ),
        ("rule_unavailable", _) => {}
        _ => problems.add(
            kind_key,
            format!(
                "`{kind}` is not a problem kind: use `schema`, `schema/<keyword>`, `rule`, `rule/<name>`, `rule_unavailable` or `rule_unavailable/<webhook>`"
            ),
        ),
    }
    if let Some(prefix) = &selector.path_prefix
        && !is_pointer(prefix)
    {
        problems.add(
            format!("{key}.path_prefix"),
            format!("`{prefix}` is not a JSON pointer: start it with `/` (e.g. `/order_id`)"),
        );
    }
}

/// A JSON pointer (RFC 6901): empty (the whole document) or starting with `/`.
fn is_pointer(text: &str) -> bool {
    text.is_empty() || text.starts_with('/')
}
