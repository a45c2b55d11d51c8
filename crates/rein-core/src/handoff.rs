//! Escalation: the decision to send a conversation to a person, and the packet that goes with
//! it. Every escalation has one [`Trigger`], counted on its own, and the triggers run in the
//! spec's order: the hand-off rules on the customer's message first ([`HandoffRules`], which
//! need no model call), then the coverage check after retrieval and before drafting
//! ([`crate::coverage`]), then the checks on the finished answer (failed after its one repair);
//! a stop condition ([`crate::run`]) and a gated action escalate whenever they happen. The
//! [`HandoffPacket`] is what the person gets: the customer's message, the draft beside the
//! evidence it used, the run's tool calls, the attempts and a trace link, so they can decide
//! without redoing the agent's work. Delivering and keeping it is the runtime's job.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::{CallReport, Step};
use crate::validate::EvidenceItem;

/// The version of [`HandoffPacket`]'s shape; stored packets of older versions stay readable.
pub const PACKET_SCHEMA_VERSION: u32 = 1;

/// Why a conversation went to a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A hand-off rule on the customer's message ([`HandoffRule`]).
    HandoffRule,
    /// The coverage check scored the evidence under the route's cutoff.
    Coverage,
    /// The finished answer failed its checks after its one repair.
    ChecksFailed,
    /// The run hit a stop condition.
    StopCondition,
    /// A gate in code held an action for a person.
    Gate,
    /// No model could answer and the route's degraded mode hands the conversation over.
    Degraded,
}

impl Trigger {
    pub const ALL: [Trigger; 6] = [
        Trigger::HandoffRule,
        Trigger::Coverage,
        Trigger::ChecksFailed,
        Trigger::StopCondition,
        Trigger::Gate,
        Trigger::Degraded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::HandoffRule => "handoff_rule",
            Trigger::Coverage => "coverage",
            Trigger::ChecksFailed => "checks_failed",
            Trigger::StopCondition => "stop_condition",
            Trigger::Gate => "gate",
            Trigger::Degraded => "degraded",
        }
    }

    /// The trigger a name stands for.
    pub fn parse(name: &str) -> Option<Trigger> {
        Trigger::ALL.into_iter().find(|trigger| trigger.as_str() == name)
    }
}

/// A hand-off rule on the customer's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffRule {
    /// The customer asks for a person.
    AsksForPerson,
    /// The same question a second time in one conversation.
    RepeatedQuestion,
    /// Search found nothing to answer from.
    NoEvidence,
}

impl HandoffRule {
    pub fn as_str(self) -> &'static str {
        match self {
            HandoffRule::AsksForPerson => "asks_for_person",
            HandoffRule::RepeatedQuestion => "repeated_question",
            HandoffRule::NoEvidence => "no_evidence",
        }
    }
}

/// The phrases that mean "a person, please" unless a route lists its own.
pub const DEFAULT_PERSON_PHRASES: &[&str] = &[
    "a person",
    "a human",
    "real person",
    "human agent",
    "live agent",
    "an agent",
    "someone real",
    "customer service representative",
    "speak to someone",
    "talk to someone",
];

/// A route's hand-off rules: what, in the customer's message alone, sends the conversation to a
/// person before any model is asked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HandoffRules {
    /// Phrases (matched case-insensitively, on word boundaries) that ask for a person; empty:
    /// the rule is off.
    pub asks_for_person: Vec<String>,
    /// The same question (normalised: case, punctuation and spacing ignored) asked in a second
    /// run of one conversation.
    pub repeated_question: bool,
    /// A call that has been through search (the caller sent an explicit evidence list, or the
    /// run has called tools) and has no evidence at all.
    pub no_evidence: bool,
}

impl Default for HandoffRules {
    fn default() -> Self {
        Self {
            asks_for_person: DEFAULT_PERSON_PHRASES.iter().map(|p| p.to_string()).collect(),
            repeated_question: true,
            no_evidence: true,
        }
    }
}

impl HandoffRules {
    /// Rules that never fire.
    pub fn off() -> Self {
        Self { asks_for_person: Vec::new(), repeated_question: false, no_evidence: false }
    }

    /// The phrase of `asks_for_person` the message contains, if any.
    pub fn asks_for_person(&self, message: &str) -> Option<&str> {
        let words = normalise(message);
        let padded = format!(" {words} ");
        self.asks_for_person
            .iter()
            .find(|phrase| {
                let phrase = normalise(phrase);
                !phrase.is_empty() && padded.contains(&format!(" {phrase} "))
            })
            .map(String::as_str)
    }
}

/// The customer's message as the same-question rule compares it: lowercase words of letters
/// and digits, one space apart.
pub fn normalise(message: &str) -> String {
    message
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// One tool call of the run, as the reviewer reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallLine {
    pub tool: String,
    pub args: Value,
    /// The envelope's status (`ok`, `refused`, ...).
    pub status: String,
    /// The envelope the model saw.
    pub result: Value,
    pub at_unix_ms: i64,
}

/// One attempt of the call that escalated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptLine {
    pub tier: String,
    pub provider: String,
    /// `ok`, or the failure's kind (`overloaded`, `timeout`, ...).
    pub result: String,
}

/// What the call that escalated did, in short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptsSummary {
    pub outcome: String,
    /// The tier that answered, if one did.
    pub served_by: Option<String>,
    pub attempts: Vec<AttemptLine>,
    pub reasks: u32,
    pub elapsed_ms: u64,
}

impl AttemptsSummary {
    /// The summary of a call's report.
    pub fn of(report: &CallReport) -> Self {
        let mut attempts = Vec::new();
        let mut reasks = 0;
        for step in &report.steps {
            match step {
                Step::Attempt(attempt) => attempts.push(AttemptLine {
                    tier: attempt.tier_name.clone(),
                    provider: attempt.provider.clone(),
                    result: attempt
                        .classified
                        .as_ref()
                        .map_or_else(|| "ok".to_string(), |c| c.kind.as_str().to_string()),
                }),
                Step::Reask { .. } => reasks += 1,
                _ => {}
            }
        }
        Self {
            outcome: report.outcome.as_str().to_string(),
            served_by: report.served_by.as_ref().map(|served| served.tier_name.clone()),
            attempts,
            reasks,
            elapsed_ms: report.elapsed_ms,
        }
    }
}

/// Everything a person needs to decide on an escalated conversation, in one versioned object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffPacket {
    /// [`PACKET_SCHEMA_VERSION`] when written.
    pub schema_version: u32,
    pub conversation_id: String,
    pub run_id: Option<String>,
    pub route: Option<String>,
    pub trigger: Trigger,
    /// What fired, in the trigger's terms: the hand-off rule, the stop status, the coverage
    /// score against its cutoff, the failed checks, the gate's reason.
    pub reason: String,
    /// For a stop condition: the run's status (`stopped_repeated_call`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_status: Option<String>,
    /// The customer's message (the last user message of the run's model calls).
    pub customer_message: Option<String>,
    /// The answer the agent drafted, if it got that far.
    pub draft: Option<String>,
    /// The evidence beside the draft: what the run's tools returned and the caller passed.
    pub evidence: Vec<EvidenceItem>,
    /// The run's tool calls and what they returned, oldest first.
    pub tool_calls: Vec<ToolCallLine>,
    /// The call that escalated, if a model call did.
    pub attempts: Option<AttemptsSummary>,
    /// The coverage check's verdict, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage: Option<Value>,
    /// The trace of the call that escalated, in rein's trace store and the OTLP backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Where that trace is: the configured URL template, filled; else the gateway's own
    /// `/admin/traces/{trace_id}` (`rein traces show` prints it).
    pub trace_url: Option<String>,
    pub created_unix_ms: i64,
}

/// The trace link of a packet when no template is configured: the gateway's trace store.
pub const DEFAULT_TRACE_URL: &str = "/admin/traces/{trace_id}";

/// Fill `{trace_id}`, `{run_id}`, `{conversation_id}` and `{request_id}` in a trace URL
/// template.
pub fn trace_url(
    template: &str,
    trace_id: &str,
    run_id: Option<&str>,
    conversation_id: &str,
    request_id: &str,
) -> String {
    template
        .replace("{trace_id}", trace_id)
        .replace("{run_id}", run_id.unwrap_or(""))
        .replace("{conversation_id}", conversation_id)
        .replace("{request_id}", request_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asking_for_a_person_matches_whole_words_in_any_case() {
        let rules = HandoffRules::default();
        assert_eq!(rules.asks_for_person("Can I talk to a HUMAN please?"), Some("a human"));
        assert_eq!(rules.asks_for_person("I want a real person!"), Some("real person"));
        assert_eq!(rules.asks_for_person("Where is my order 4417?"), None);
        // Not a word boundary: "a humane society" is not asking for a person.
        assert_eq!(rules.asks_for_person("Do you deliver to a humane society?"), None);
        assert_eq!(HandoffRules::off().asks_for_person("a person"), None);
    }

    #[test]
    fn the_same_question_is_the_same_after_normalising() {
        assert_eq!(
            normalise("Can flowers go to an ICU?"),
            normalise("  can FLOWERS go to an icu ")
        );
        assert_ne!(normalise("order 4417"), normalise("order 4471"));
    }

    #[test]
    fn triggers_have_stable_names() {
        for trigger in Trigger::ALL {
            assert_eq!(Trigger::parse(trigger.as_str()), Some(trigger));
            let json = serde_json::to_value(trigger).unwrap();
            assert_eq!(json, trigger.as_str());
        }
    }

    #[test]
    fn the_trace_url_is_filled() {
        let url = trace_url(
            "https://t/{conversation_id}/{run_id}?r={request_id}",
            "t1",
            Some("r1"),
            "c1",
            "q",
        );
        assert_eq!(url, "https://t/c1/r1?r=q");
        assert_eq!(trace_url(DEFAULT_TRACE_URL, "abc", None, "c1", "q"), "/admin/traces/abc");
    }
}
