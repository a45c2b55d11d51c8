//! Scenarios: a timeline of phases, each serving one fault spec or a seeded weighted mix of
//! them, starting when the simulator starts (and again on `POST /_sim/reset`); and reply rules,
//! which script what the answer to a request says.
//!
//! ```toml
//! name = "brownout"
//! seed = 7                      # seeds every mix (a phase may set its own)
//! repeat = false                # true: start over after the last phase
//!
//! [[phase]]
//! name = "warm"
//! duration_s = 10
//! fault = "ok"
//!
//! [[phase]]
//! name = "brownout"
//! duration_s = 60
//! models = ["gpt-4o*"]          # only these models (a trailing * matches a prefix)
//! format = "openai"             # only this wire format ("openai" or "anthropic")
//! mix = [
//!   { fault = "529", weight = 30 },
//!   { fault = "slow_first_token:ms=3000", weight = 70 },
//! ]
//!
//! [[phase]]
//! name = "recovered"            # the last phase may omit duration_s: it lasts forever
//! fault = "ok"
//!
//! [[reply]]
//! contains = "intensive care"   # in the last user message, ignoring case (required)
//! models = ["small*"]           # optional: only these models (a trailing * matches a prefix)
//! texts = ["covered", "not_covered"] # the n-th answer by this rule says texts[n % len]
//! logprob = -0.05               # optional: every token's log probability (<= 0)
//!
//! [[reply]]
//! contains = "dental"
//! text = "covered"              # one text for every answer by this rule
//! ```
//!
//! Requests that a phase's `models` / `format` filters exclude are healthy during that phase.
//! After the last phase ends (when it has a duration and `repeat` is off) every request is
//! healthy. The n-th request inside a mixed phase always draws the same fault for the same
//! seed, so a drill is reproducible when its requests arrive in the same order.
//!
//! Reply rules are tried in order and the first that matches a request answers it: the answer
//! says exactly the rule's text, one token per word (with its space), with end of turn as its
//! stop reason (unless the request's own `max_tokens` cuts it); OpenAI logprobs, when asked,
//! carry the rule's `logprob`. Rules apply only where the answer would be text (not a tool
//! call, not JSON), and yield to a fault's `say` text and `refusal`; every other fault still
//! applies (an error status answers instead, `cut` cuts the rule's tokens). A rule with `texts`
//! counts the requests it answers (errors and dropped connections answer none), from the start
//! and again from each reset. A scenario may have reply rules and no phases: then only the
//! rules change anything.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_core::WireFormat;
use serde::Deserialize;

use crate::answer::splitmix64;
use crate::fault::FaultSpec;

/// A validated scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    name: Option<String>,
    repeat: bool,
    phases: Vec<Phase>,
    replies: Vec<ReplyRule>,
}

/// One phase of a scenario.
#[derive(Debug, Clone)]
pub struct Phase {
    /// The phase's name, or `phase[i]`.
    pub name: String,
    /// `None` only for a last phase that lasts forever.
    pub duration: Option<Duration>,
    pub faults: PhaseFaults,
    /// Seed of this phase's mix.
    pub seed: u64,
    /// Only requests of this wire format get the phase's faults.
    pub format: Option<WireFormat>,
    /// Only requests for these models get the phase's faults (empty: all models).
    pub models: Vec<String>,
}

/// A `[[reply]]` rule: what the answer says to a request whose last user message contains a
/// phrase.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplyRule {
    /// The phrase, matched ignoring case against the last user message's text.
    pub contains: String,
    /// Only requests for these models (empty: all models).
    pub models: Vec<String>,
    /// The answers, used in turn (`text = ".."` is a list of one); never empty.
    pub texts: Vec<String>,
    /// The log probability of every token of the answer; `None`: the usual deterministic ones.
    pub logprob: Option<f64>,
}

/// What a phase serves.
#[derive(Debug, Clone)]
pub enum PhaseFaults {
    Single(FaultSpec),
    /// Each request draws one entry with probability proportional to its weight.
    Mix(Vec<(FaultSpec, f64)>),
}

/// A scenario that could not be read, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario file {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("scenario: {0}")]
    Toml(String),
    #[error("scenario: `{key}`: {message}")]
    Invalid { key: String, message: String },
}

fn invalid(key: impl Into<String>, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid { key: key.into(), message: message.into() }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    seed: Option<u64>,
    repeat: Option<bool>,
    #[serde(default)]
    phase: Vec<RawPhase>,
    #[serde(default)]
    reply: Vec<RawReply>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReply {
    contains: Option<String>,
    models: Option<Vec<String>>,
    text: Option<String>,
    texts: Option<Vec<String>>,
    logprob: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPhase {
    name: Option<String>,
    duration_s: Option<f64>,
    fault: Option<String>,
    mix: Option<Vec<RawMixEntry>>,
    seed: Option<u64>,
    format: Option<String>,
    models: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMixEntry {
    fault: String,
    weight: f64,
}

impl Scenario {
    /// Parses and validates a scenario. Errors name the bad key, e.g.
    /// "`phase[1].mix[0].fault`: bad fault spec `52`: unknown fault `52`; …".
    pub fn from_toml_str(text: &str) -> Result<Scenario, ScenarioError> {
        let raw: RawScenario =
            toml::from_str(text).map_err(|e| ScenarioError::Toml(e.to_string()))?;
        if raw.phase.is_empty() && raw.reply.is_empty() {
            return Err(invalid("phase", "a scenario needs at least one [[phase]] or [[reply]]"));
        }
        let repeat = raw.repeat.unwrap_or(false);
        let last = raw.phase.len().saturating_sub(1);
        let mut phases = Vec::with_capacity(raw.phase.len());
        for (i, p) in raw.phase.into_iter().enumerate() {
            let key = format!("phase[{i}]");
            let duration = match p.duration_s {
                Some(secs) if secs.is_finite() && secs > 0.0 => Some(Duration::from_secs_f64(secs)),
                Some(secs) => {
                    return Err(invalid(
                        format!("{key}.duration_s"),
                        format!("must be a positive number of seconds, not {secs}"),
                    ));
                }
                None if i == last && !repeat => None,
                None if i == last => {
                    return Err(invalid(
                        format!("{key}.duration_s"),
                        "with `repeat = true` every phase needs a duration",
                    ));
                }
                None => {
                    return Err(invalid(
                        format!("{key}.duration_s"),
                        "missing: only the last phase may last forever",
                    ));
                }
            };
            let faults = match (p.fault, p.mix) {
                (Some(spec), None) => PhaseFaults::Single(
                    FaultSpec::parse(&spec)
                        .map_err(|e| invalid(format!("{key}.fault"), e.to_string()))?,
                ),
                (None, Some(mix)) => PhaseFaults::Mix(parse_mix(&key, mix)?),
                (Some(_), Some(_)) => {
                    return Err(invalid(key, "give either `fault` or `mix`, not both"));
                }
                (None, None) => {
                    return Err(invalid(key, "needs `fault = \"<spec>\"` or a weighted `mix`"));
                }
            };
            let format = match p.format.as_deref() {
                None => None,
                Some("openai") => Some(WireFormat::OpenAi),
                Some("anthropic") => Some(WireFormat::Anthropic),
                Some(other) => {
                    return Err(invalid(
                        format!("{key}.format"),
                        format!("must be \"openai\" or \"anthropic\", not \"{other}\""),
                    ));
                }
            };
            let models = p.models.unwrap_or_default();
            check_models(&key, &models)?;
            phases.push(Phase {
                name: p.name.unwrap_or_else(|| key.clone()),
                duration,
                faults,
                seed: p.seed.or(raw.seed).unwrap_or(0),
                format,
                models,
            });
        }
        let replies = raw
            .reply
            .into_iter()
            .enumerate()
            .map(|(i, r)| parse_reply(&format!("reply[{i}]"), r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scenario { name: raw.name, repeat, phases, replies })
    }

    /// Reads and parses a scenario file.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ScenarioError::Read { path: path.to_owned(), source })?;
        Scenario::from_toml_str(&text)
    }

    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The phases, in order; possibly none (a scenario of reply rules only).
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// The reply rules, in the order they are tried.
    pub fn replies(&self) -> &[ReplyRule] {
        &self.replies
    }

    /// The first reply rule matching a request for `model` whose last user message says
    /// `last_user_text`, with its index.
    pub fn reply_for(&self, model: &str, last_user_text: &str) -> Option<(usize, &ReplyRule)> {
        let text = last_user_text.to_lowercase();
        self.replies.iter().enumerate().find(|(_, rule)| rule.matches_lowercase(model, &text))
    }

    /// The phase in force `elapsed` after the timeline started, with its index; `None` once
    /// the timeline is over.
    pub fn phase_at(&self, elapsed: Duration) -> Option<(usize, &Phase)> {
        let total: Option<Duration> = self.phases.iter().map(|p| p.duration).sum();
        let mut at = match total {
            Some(total) if self.repeat && !total.is_zero() => {
                Duration::from_nanos((elapsed.as_nanos() % total.as_nanos()) as u64)
            }
            _ => elapsed,
        };
        for (i, phase) in self.phases.iter().enumerate() {
            match phase.duration {
                None => return Some((i, phase)),
                Some(d) if at < d => return Some((i, phase)),
                Some(d) => at -= d,
            }
        }
        None
    }
}

impl Phase {
    /// True when the phase's filters select this request.
    pub fn applies_to(&self, format: Option<WireFormat>, model: &str) -> bool {
        if let Some(want) = self.format
            && format != Some(want)
        {
            return false;
        }
        models_match(&self.models, model)
    }

    /// The spec for the `draw`-th request in this phase (the phase being the `index`-th);
    /// `None` only for an empty mix.
    pub fn pick(&self, index: usize, draw: u64) -> Option<&FaultSpec> {
        match &self.faults {
            PhaseFaults::Single(spec) => Some(spec),
            PhaseFaults::Mix(entries) => {
                let total: f64 = entries.iter().map(|(_, w)| w).sum();
                let random = splitmix64(self.seed ^ splitmix64(index as u64) ^ splitmix64(!draw));
                let mut target = (random >> 11) as f64 / (1u64 << 53) as f64 * total;
                for (spec, weight) in entries {
                    if target < *weight {
                        return Some(spec);
                    }
                    target -= weight;
                }
                // Rounding left us past the end: the last entry.
                entries.last().map(|(spec, _)| spec)
            }
        }
    }
}

impl ReplyRule {
    /// True when this rule answers a request for `model` whose last user message says
    /// `last_user_text`.
    pub fn matches(&self, model: &str, last_user_text: &str) -> bool {
        self.matches_lowercase(model, &last_user_text.to_lowercase())
    }

    fn matches_lowercase(&self, model: &str, lowercase_text: &str) -> bool {
        models_match(&self.models, model) && lowercase_text.contains(&self.contains.to_lowercase())
    }

    /// The text of the `n`-th answer (0-based) by this rule.
    pub fn text(&self, n: u64) -> &str {
        let len = self.texts.len().max(1) as u64;
        self.texts.get((n % len) as usize).map_or("", String::as_str)
    }
}

/// True when `models` is empty or one of its names (a trailing * matches a prefix) is `model`.
fn models_match(models: &[String], model: &str) -> bool {
    models.is_empty()
        || models.iter().any(|m| match m.strip_suffix('*') {
            Some(prefix) => model.starts_with(prefix),
            None => model == m,
        })
}

fn check_models(key: &str, models: &[String]) -> Result<(), ScenarioError> {
    for (j, model) in models.iter().enumerate() {
        let stem = model.strip_suffix('*').unwrap_or(model);
        if model.is_empty() || stem.contains('*') {
            return Err(invalid(
                format!("{key}.models[{j}]"),
                "a model name, optionally ending in * to match a prefix",
            ));
        }
    }
    Ok(())
}

fn parse_reply(key: &str, raw: RawReply) -> Result<ReplyRule, ScenarioError> {
    let contains = match raw.contains {
        Some(phrase) if !phrase.is_empty() => phrase,
        Some(_) => return Err(invalid(format!("{key}.contains"), "must not be empty")),
        None => {
            return Err(invalid(
                format!("{key}.contains"),
                "missing: the phrase the last user message must contain",
            ));
        }
    };
    let models = raw.models.unwrap_or_default();
    check_models(key, &models)?;
    let texts = match (raw.text, raw.texts) {
        (Some(text), None) => vec![text],
        (None, Some(texts)) if texts.is_empty() => {
            return Err(invalid(format!("{key}.texts"), "needs at least one text"));
        }
        (None, Some(texts)) => texts,
        (Some(_), Some(_)) => {
            return Err(invalid(key, "give either `text` or `texts`, not both"));
        }
        (None, None) => {
            return Err(invalid(key, "needs `text = \"<answer>\"` or `texts = [..]`"));
        }
    };
    if let Some(logprob) = raw.logprob
        && !(logprob.is_finite() && logprob <= 0.0)
    {
        return Err(invalid(
            format!("{key}.logprob"),
            format!("must be <= 0 (a log probability), not {logprob}"),
        ));
    }
    Ok(ReplyRule { contains, models, texts, logprob: raw.logprob })
}

fn parse_mix(key: &str, mix: Vec<RawMixEntry>) -> Result<Vec<(FaultSpec, f64)>, ScenarioError> {
    if mix.is_empty() {
        return Err(invalid(format!("{key}.mix"), "a mix needs at least one entry"));
    }
    mix.into_iter()
        .enumerate()
        .map(|(j, entry)| {
            let entry_key = format!("{key}.mix[{j}]");
            let spec = FaultSpec::parse(&entry.fault)
                .map_err(|e| invalid(format!("{entry_key}.fault"), e.to_string()))?;
            if spec.is_script() {
                return Err(invalid(
                    format!("{entry_key}.fault"),
                    "a mix entry is one step; put scripts (a,b,c) in a phase's `fault`",
                ));
            }
            if !(entry.weight.is_finite() && entry.weight > 0.0) {
                return Err(invalid(
                    format!("{entry_key}.weight"),
                    format!("must be a positive number, not {}", entry.weight),
                ));
            }
            Ok((spec, entry.weight))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BROWNOUT: &str = r#"
        seed = 3
        [[phase]]
        duration_s = 10
        fault = "503"
        [[phase]]
        duration_s = 20
        mix = [{ fault = "529", weight = 30 }, { fault = "ok", weight = 70 }]
        [[phase]]
        name = "after"
        fault = "ok"
    "#;

    #[test]
    fn phases_follow_the_clock() {
        let s = Scenario::from_toml_str(BROWNOUT).unwrap();
        let at = |secs: f64| s.phase_at(Duration::from_secs_f64(secs)).map(|(i, _)| i);
        assert_eq!(at(0.0), Some(0));
        assert_eq!(at(9.99), Some(0));
        assert_eq!(at(10.0), Some(1));
        assert_eq!(at(29.0), Some(1));
        assert_eq!(at(1e6), Some(2));
        assert_eq!(s.phases()[2].name, "after");
        assert_eq!(s.phases()[0].name, "phase[0]");
    }

    #[test]
    fn mixes_are_seeded_and_weighted() {
        let s = Scenario::from_toml_str(BROWNOUT).unwrap();
        let phase = &s.phases()[1];
        let draws: Vec<&str> = (0..1000).map(|n| phase.pick(1, n).unwrap().as_str()).collect();
        let again: Vec<&str> = (0..1000).map(|n| phase.pick(1, n).unwrap().as_str()).collect();
        assert_eq!(draws, again);
        let overloaded = draws.iter().filter(|d| **d == "529").count();
        assert!((240..360).contains(&overloaded), "{overloaded}");
    }

    #[test]
    fn repeat_wraps_around() {
        let s = Scenario::from_toml_str(
            "repeat = true\n[[phase]]\nduration_s = 1\nfault = \"503\"\n\
             [[phase]]\nduration_s = 1\nfault = \"ok\"\n",
        )
        .unwrap();
        assert_eq!(s.phase_at(Duration::from_millis(2500)).map(|(i, _)| i), Some(0));
        assert_eq!(s.phase_at(Duration::from_millis(3500)).map(|(i, _)| i), Some(1));
    }

    #[test]
    fn finite_timelines_end() {
        let s = Scenario::from_toml_str("[[phase]]\nduration_s = 1\nfault = \"503\"\n").unwrap();
        assert!(s.phase_at(Duration::from_secs(2)).is_none());
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            ("[[phase]]\nfault = \"ok\"\ndurtion_s = 1\n", "durtion_s"),
            ("[[phase]]\nfault = \"52\"\n", "`phase[0].fault`: bad fault spec `52`"),
            ("[[phase]]\nfault = \"ok\"\n[[phase]]\nfault = \"ok\"\n", "`phase[0].duration_s`"),
            ("[[phase]]\nmix = [{ fault = \"ok\", weight = 0 }]\n", "`phase[0].mix[0].weight`"),
            ("[[phase]]\nmix = [{ fault = \"ok,529\", weight = 1 }]\n", "`phase[0].mix[0].fault`"),
            ("[[phase]]\nfault = \"ok\"\nformat = \"gemini\"\n", "`phase[0].format`"),
            ("[[phase]]\n", "`phase[0]`: needs `fault"),
            ("name = \"x\"\n", "`phase`: a scenario needs at least one [[phase]] or [[reply]]"),
            ("[[reply]]\ntext = \"a\"\n", "`reply[0].contains`: missing"),
            ("[[reply]]\ncontains = \"\"\ntext = \"a\"\n", "`reply[0].contains`: must not"),
            ("[[reply]]\ncontains = \"x\"\n", "`reply[0]`: needs `text"),
            ("[[reply]]\ncontains = \"x\"\ntext = \"a\"\ntexts = [\"b\"]\n", "`reply[0]`: give"),
            ("[[reply]]\ncontains = \"x\"\ntexts = []\n", "`reply[0].texts`: needs"),
            (
                "[[reply]]\ncontains = \"x\"\ntext = \"a\"\n\
                 [[reply]]\ncontains = \"y\"\ntext = \"b\"\nlogprob = 0.5\n",
                "`reply[1].logprob`: must be <= 0",
            ),
            ("[[reply]]\ncontains = \"x\"\ntext = \"a\"\nlogprob = nan\n", "`reply[0].logprob`"),
            (
                "[[reply]]\ncontains = \"x\"\ntext = \"a\"\nmodels = [\"a*b\"]\n",
                "`reply[0].models[0]`",
            ),
            ("[[reply]]\ncontains = \"x\"\ntext = \"a\"\nlabel = \"b\"\n", "unknown field `label`"),
        ];
        for (text, want) in cases {
            let err = Scenario::from_toml_str(text).unwrap_err().to_string();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn filters_select_requests() {
        let s = Scenario::from_toml_str(
            "[[phase]]\nfault = \"529\"\nformat = \"anthropic\"\nmodels = [\"claude-*\", \"x\"]\n",
        )
        .unwrap();
        let p = &s.phases()[0];
        assert!(p.applies_to(Some(WireFormat::Anthropic), "claude-3"));
        assert!(p.applies_to(Some(WireFormat::Anthropic), "x"));
        assert!(!p.applies_to(Some(WireFormat::Anthropic), "xy"));
        assert!(!p.applies_to(Some(WireFormat::OpenAi), "claude-3"));
    }

    #[test]
    fn replies_alone_make_a_scenario() {
        let s = Scenario::from_toml_str(
            "repeat = true\n[[reply]]\ncontains = \"x\"\ntext = \"a\"\nlogprob = 0\n",
        )
        .unwrap();
        assert!(s.phases().is_empty());
        assert!(s.phase_at(Duration::ZERO).is_none());
        assert!(s.phase_at(Duration::from_secs(100)).is_none());
        let rule = &s.replies()[0];
        assert_eq!(rule.texts, ["a"]);
        assert_eq!(rule.logprob, Some(0.0));
        assert!(rule.models.is_empty());
    }

    #[test]
    fn replies_match_in_order_ignoring_case() {
        let s = Scenario::from_toml_str(
            r#"
            [[reply]]
            contains = "Intensive Care"
            models = ["small*"]
            texts = ["a", "b", "c"]
            logprob = -0.05
            [[reply]]
            contains = "intensive"
            text = "any model"
            [[reply]]
            contains = "care"
            text = "never for intensive care"
            "#,
        )
        .unwrap();
        let index = |model: &str, text: &str| s.reply_for(model, text).map(|(i, _)| i);
        assert_eq!(index("small-1", "is INTENSIVE CARE covered?"), Some(0));
        assert_eq!(index("large", "is intensive care covered?"), Some(1));
        assert_eq!(index("small-1", "intensive"), Some(1));
        assert_eq!(index("small-1", "day care"), Some(2));
        assert_eq!(index("small-1", "dental"), None);
        let rule = &s.replies()[0];
        assert!(rule.matches("small", "intensive care"));
        assert!(!rule.matches("smal", "intensive care"));
        assert_eq!((0..4).map(|n| rule.text(n)).collect::<Vec<_>>(), ["a", "b", "c", "a"]);
        assert_eq!(s.replies()[1].text(7), "any model");
    }
}
