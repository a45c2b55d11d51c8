//! Hand-offs: a conversation rein sent to a person, with the packet that explains it (what the
//! run did, why it was handed off), where its ticket went, and a reviewer's decision on its
//! draft. A conversation has at most one hand-off (its `conversation_id` is unique), so
//! replicas handing off the same conversation at once make one. Only the first decision on a
//! hand-off takes effect. Canaries (hand-offs planted to check that reviewers catch a bad draft)
//! are counted apart in [`ReviewStats`].
//!
//! The spend of a conversation and the questions its runs asked, which hand-off rules read, are
//! kept through [`crate::ToolStore`] as well: plain numbers and digests, with no types here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a hand-off's ticket is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandoffDelivery {
    /// Not sent anywhere yet.
    Pending,
    /// The ticket system took it.
    Delivered,
    /// Waiting to be sent again (the ticket system was unreachable).
    Queued,
    /// The ticket system refused it for good.
    Failed,
}

impl HandoffDelivery {
    /// The name stored in the backends' `delivery` columns (the serde name).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Queued => "queued",
            Self::Failed => "failed",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Queued, Self::Failed]
            .into_iter()
            .find(|delivery| delivery.as_str() == name)
    }
}

/// A reviewer's decision on a hand-off's draft.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewDecision {
    /// The draft went out as it was.
    Approved,
    /// The reviewer changed the draft ([`Handoff::edited_draft`]).
    Edited,
    /// The draft was not to be sent.
    Rejected,
}

impl ReviewDecision {
    /// The name stored in the backends' `decision` columns (the serde name).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Edited => "edited",
            Self::Rejected => "rejected",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Self> {
        [Self::Approved, Self::Edited, Self::Rejected]
            .into_iter()
            .find(|decision| decision.as_str() == name)
    }
}

/// A hand-off to open.
#[derive(Debug, Clone, PartialEq)]
pub struct NewHandoff {
    pub conversation_id: String,
    /// The run that was handed off, when one was.
    pub run_id: Option<String>,
    pub route: Option<String>,
    /// Which hand-off rule fired, in the rule's name.
    pub trigger: String,
    /// The run's stop status, when a stop caused the hand-off.
    pub stop_status: Option<String>,
    /// What the person is given: the conversation, what the run did, the draft.
    pub packet: Value,
    /// Planted to check the reviewers (counted apart in [`ReviewStats`]).
    pub canary: bool,
}

/// A conversation handed off to a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handoff {
    pub id: i64,
    pub conversation_id: String,
    pub run_id: Option<String>,
    pub route: Option<String>,
    pub trigger: String,
    pub stop_status: Option<String>,
    pub packet: Value,
    pub canary: bool,
    pub delivery: HandoffDelivery,
    /// What the ticket system answered (its ticket's id, link, ...).
    pub ticket: Option<Value>,
    /// Why a delivery is queued or failed, in words.
    pub delivery_detail: Option<String>,
    pub created_unix_ms: i64,
    /// When the ticket system took it.
    pub delivered_unix_ms: Option<i64>,
    pub decision: Option<ReviewDecision>,
    pub decided_by: Option<String>,
    /// The draft as the reviewer changed it.
    pub edited_draft: Option<String>,
    pub note: Option<String>,
    pub decided_unix_ms: Option<i64>,
}

/// Which hand-offs [`crate::ToolStore::handoff_list`] lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HandoffFilter {
    /// Only those of this trigger.
    pub trigger: Option<String>,
    /// `Some(false)`: undecided only; `Some(true)`: decided only.
    pub decided: Option<bool>,
}

/// One trigger's review counts, over the hand-offs created at or after a time. Canaries are
/// counted apart: never in `handoffs`, `decided` or `changed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewStats {
    pub trigger: String,
    /// Hand-offs that are not canaries.
    pub handoffs: i64,
    /// Of those, the decided ones.
    pub decided: i64,
    /// Of those, the edited or rejected ones.
    pub changed: i64,
    pub canaries: i64,
    pub canaries_decided: i64,
    /// Canaries edited or rejected: a reviewer caught them.
    pub canaries_caught: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_names_are_the_serde_names() {
        for delivery in [
            HandoffDelivery::Pending,
            HandoffDelivery::Delivered,
            HandoffDelivery::Queued,
            HandoffDelivery::Failed,
        ] {
            let serde = serde_json::to_value(delivery).unwrap();
            assert_eq!(serde, Value::from(delivery.as_str()));
            assert_eq!(HandoffDelivery::parse(delivery.as_str()), Some(delivery));
        }
        for decision in [ReviewDecision::Approved, ReviewDecision::Edited, ReviewDecision::Rejected]
        {
            let serde = serde_json::to_value(decision).unwrap();
            assert_eq!(serde, Value::from(decision.as_str()));
            assert_eq!(ReviewDecision::parse(decision.as_str()), Some(decision));
        }
        assert_eq!(HandoffDelivery::parse("sent"), None);
        assert_eq!(ReviewDecision::parse("approve"), None);
    }
}
