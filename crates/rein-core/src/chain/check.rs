//! The validation ladder inside the chain: what happens when a tier's answer arrives. The rungs
//! themselves live in [`crate::validate`]; this decides the move for each verdict — accept
//! (with any code repairs), ask the same tier again once (a higher ceiling after a cut-off, the
//! exact problems after failed checks), reject (next tier), decline (the safe reply) or stop
//! (content filter). Passthrough streams are checked after the fact: recorded, never acted on.

use std::borrow::Cow;

use crate::model::{ChatRequest, ChatResponse, Message, ResponseFormat};
use crate::report::{ReaskReason, Step, millis};
use crate::route::Route;
use crate::validate::{
    CompiledSchema, OutputContract, Verdict, check_answer, raised_ceiling, reask_message,
};

use super::Engine;
use super::call::{CallOptions, CallState};

/// The move decided for an answer.
pub(super) enum Checked {
    /// Use it; `text` replaces the answer's text when code repairs changed it.
    Accept { text: Option<String> },
    /// Ask the same tier again with this request.
    Reask(Box<ChatRequest>),
    /// Do not use it; the next tier may do better.
    Rejected,
    /// The model refused: send the safe reply.
    Declined,
    /// The provider's content filter withheld it; the caller gets the reason.
    Filtered(String),
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn check(
        &self,
        route: &Route,
        tier: usize,
        response: &ChatResponse,
        sent: &ChatRequest,
        options: &CallOptions,
        already_forwarded: bool,
        call: &mut CallState,
    ) -> Checked {
        let Some(derived) = contract_for(route, sent) else {
            return Checked::Accept { text: None };
        };
        let contract = &derived;
        let verdict = check_answer(response, contract, &options.evidence).await;
        let at_ms = millis(call.deadline.elapsed());
        let (repairs, problems, failed_open) = match &verdict {
            Verdict::Pass { repairs, failed_open, .. } => {
                (repairs.clone(), Vec::new(), failed_open.clone())
            }
            Verdict::Fail { problems, repairs } => (repairs.clone(), problems.clone(), Vec::new()),
            Verdict::CutOff | Verdict::Refused { .. } | Verdict::Filtered => {
                (Vec::new(), Vec::new(), Vec::new())
            }
        };
        call.steps.push(Step::Checked {
            tier,
            at_ms,
            verdict: verdict.label(),
            repairs,
            problems,
            failed_open,
            recorded_only: already_forwarded,
        });
        if already_forwarded {
            if !verdict.is_pass() {
                tracing::warn!(route = %route.name, verdict = verdict.label(), "passthrough answer failed its checks after it was sent");
            }
            return Checked::Accept { text: None };
        }
        match verdict {
            Verdict::Pass { text, repairs, .. } => {
                Checked::Accept { text: (!repairs.is_empty()).then_some(text) }
            }
            Verdict::CutOff => {
                // Never parse the partial output: ask once more with a higher ceiling.
                let current = sent
                    .max_tokens
                    .or((response.usage.output_tokens > 0).then_some(response.usage.output_tokens))
                    .unwrap_or(route.max_tokens_cap / 2);
                match raised_ceiling(current, route.max_tokens_cap) {
                    Some(max_tokens) if !call.ceiling_raised => {
                        call.ceiling_raised = true;
                        call.steps.push(Step::Reask {
                            tier,
                            at_ms,
                            reason: ReaskReason::CutOff { max_tokens },
                        });
                        let mut next = sent.clone();
                        next.max_tokens = Some(max_tokens);
                        Checked::Reask(Box::new(next))
                    }
                    _ => Checked::Rejected,
                }
            }
            Verdict::Refused { .. } => Checked::Declined,
            Verdict::Filtered => Checked::Filtered(response.refusal.clone().unwrap_or_else(|| {
                "the provider's content filter withheld the answer".to_string()
            })),
            Verdict::Fail { problems, .. } => {
                if call.reasked {
                    return Checked::Rejected;
                }
                // One re-ask that sends the failed output and the exact problems.
                call.reasked = true;
                let mut next = sent.clone();
                next.messages.push(Message::assistant(response.text.clone()));
                next.messages
                    .push(Message::user(reask_message(&problems, contract.expects_json())));
                call.steps.push(Step::Reask {
                    tier,
                    at_ms,
                    reason: ReaskReason::ChecksFailed { problems },
                });
                Checked::Reask(Box::new(next))
            }
        }
    }
}

/// The contract an answer is held to: the route's, and when the caller asked for JSON
/// (`response_format`) the caller's schema too where the route has none of its own — rein checks
/// a schema itself even when the provider decoded with it.
fn contract_for<'a>(route: &'a Route, sent: &ChatRequest) -> Option<Cow<'a, OutputContract>> {
    let route_contract = route.contract.as_ref();
    if route_contract.is_some_and(|c| c.schema.is_some()) {
        return route_contract.map(Cow::Borrowed);
    }
    match &sent.response_format {
        Some(ResponseFormat::JsonSchema { schema, name, .. }) => {
            match CompiledSchema::new(schema) {
                Ok(compiled) => {
                    let mut contract = route_contract.cloned().unwrap_or_default();
                    contract.json = true;
                    contract.schema = Some(compiled);
                    Some(Cow::Owned(contract))
                }
                Err(error) => {
                    tracing::warn!(route = %route.name, schema = %name, "the caller's JSON schema does not compile; not checked: {error}");
                    route_contract.map(Cow::Borrowed)
                }
            }
        }
        Some(ResponseFormat::JsonObject) => {
            let mut contract = route_contract.cloned().unwrap_or_default();
            contract.json = true;
            Some(Cow::Owned(contract))
        }
        Some(ResponseFormat::Text) | None => route_contract.map(Cow::Borrowed),
    }
}
