//! The validation ladder inside the chain: what happens when a tier's answer arrives. The rungs
//! themselves live in [`crate::validate`]; this decides the move for each verdict — accept
//! (with any code repairs), ask the same tier again once (a higher ceiling after a cut-off, the
//! exact problems after failed checks), reject (next tier), decline (the safe reply) or stop
//! (content filter). Passthrough streams are checked after the fact: recorded, never acted on.
//!
//! A turn that stops to call tools is not the answer: it takes the stop-reason rung and then the
//! tool-call rung (declared tool, arguments against the tool's parameters schema), with the same
//! code repairs and the same one re-ask. The output contract (the caller's `json_schema`, the
//! route's schema and rules) applies only to the turn that answers.

use std::borrow::Cow;

use crate::model::{ChatRequest, ChatResponse, Message, ResponseFormat, ToolCall};
use crate::report::{ReaskReason, Step, millis};
use crate::route::{Route, Tier};
use crate::validate::{
    CompiledSchema, OutputContract, Verdict, check_answer, check_stop, check_tool_calls,
    is_tool_call_turn, raised_ceiling, reask_message, tool_calls_as_text, tool_reask_message,
};

use super::call::CallState;
use crate::context::CallContext;

/// The request an answer was given to, read where it lies: a re-ask's, or the call's as the
/// tier prepares it ([`Tier::prepare`]), which is not kept while the answer streams (a
/// passthrough stream holds the tier's state as long as it is open, and a copy of the
/// conversation per stream would double what it holds).
#[derive(Clone, Copy)]
pub(super) enum Sent<'a> {
    Reasked(&'a ChatRequest),
    Prepared { request: &'a ChatRequest, tier: &'a Tier },
}

impl Sent<'_> {
    /// The request as far as the tier leaves it alone: its messages, tools and
    /// `response_format`.
    fn request(&self) -> &ChatRequest {
        match self {
            Sent::Reasked(request) | Sent::Prepared { request, .. } => request,
        }
    }

    /// The output ceiling it was sent with.
    fn max_tokens(&self) -> Option<u32> {
        match self {
            Sent::Reasked(request) => request.max_tokens,
            Sent::Prepared { request, tier } => tier.max_tokens(request),
        }
    }

    /// The request as it was sent, to be extended into a re-ask.
    fn to_request(self) -> ChatRequest {
        match self {
            Sent::Reasked(request) => request.clone(),
            Sent::Prepared { request, tier } => tier.prepare(request),
        }
    }
}

/// The move decided for an answer.
pub(super) enum Checked {
    /// Use it; `text` replaces the answer's text, `tool_calls` the turn's calls, when code
    /// repairs changed them.
    Accept { text: Option<String>, tool_calls: Option<Vec<ToolCall>> },
    /// Ask the same tier again with this request.
    Reask(Box<ChatRequest>),
    /// Do not use it; the next tier may do better.
    Rejected,
    /// The model refused: send the safe reply.
    Declined,
    /// The provider's content filter withheld it; the caller gets the reason.
    Filtered(String),
}

/// Take `response`, the answer of tier number `tier` to `sent`, through the ladder, record the
/// verdict in `call`'s steps and decide the move. `already_forwarded`: a passthrough stream has
/// sent it to the caller already, so the verdict is only recorded.
pub(super) async fn check(
    ctx: &CallContext,
    route: &Route,
    tier: usize,
    response: &ChatResponse,
    sent: Sent<'_>,
    already_forwarded: bool,
    call: &mut CallState,
) -> Checked {
    let tool_turn = is_tool_call_turn(response);
    // A tool-call turn is checked as a tool call whatever the route's contract; an answer
    // only when there is a contract to hold it to.
    // The contract's check is boxed, with the contract (in a block of its own, so nothing of it
    // stays in this state): only a route with a contract runs it, and in line the two would
    // take ~600 bytes of every attempt's state (a passthrough stream's included) while the
    // answer streams. `expects_json`: what a re-ask needs of it (`None`: a tool-call turn's).
    let (checking, expects_json) = {
        let contract = if tool_turn { None } else { contract_for(route, sent.request()) };
        if !tool_turn && contract.is_none() {
            return Checked::Accept { text: None, tool_calls: None };
        }
        let expects_json = contract.as_ref().map(|contract| contract.expects_json());
        let checking = contract
            .map(|contract| Box::pin(async move { check_answer(ctx, response, &contract).await }));
        (checking, expects_json)
    };
    let (verdict, repaired_calls) = match checking {
        Some(checking) => (checking.await, None),
        None => match check_stop(response) {
            Some(verdict) => (verdict, None),
            None => {
                let checked = check_tool_calls(response, &sent.request().tools);
                if checked.passed() {
                    let verdict = Verdict::Pass {
                        text: response.text.clone(),
                        json: None,
                        repairs: checked.repairs,
                        failed_open: Vec::new(),
                    };
                    (verdict, Some(checked.calls))
                } else {
                    (Verdict::Fail { problems: checked.problems, repairs: checked.repairs }, None)
                }
            }
        },
    };
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
        return Checked::Accept { text: None, tool_calls: None };
    }
    match verdict {
        Verdict::Pass { text, repairs, .. } => {
            if repairs.is_empty() {
                Checked::Accept { text: None, tool_calls: None }
            } else if tool_turn {
                Checked::Accept { text: None, tool_calls: repaired_calls }
            } else {
                Checked::Accept { text: Some(text), tool_calls: None }
            }
        }
        Verdict::CutOff => {
            // Never parse the partial output: ask once more with a higher ceiling.
            let current = sent
                .max_tokens()
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
                    let mut next = sent.to_request();
                    next.max_tokens = Some(max_tokens);
                    Checked::Reask(Box::new(next))
                }
                _ => Checked::Rejected,
            }
        }
        Verdict::Refused { .. } => Checked::Declined,
        Verdict::Filtered => Checked::Filtered(
            response
                .refusal
                .clone()
                .unwrap_or_else(|| "the provider's content filter withheld the answer".to_string()),
        ),
        Verdict::Fail { problems, .. } => {
            if call.reasked {
                return Checked::Rejected;
            }
            // One re-ask that sends the failed output and the exact problems.
            call.reasked = true;
            let mut next = sent.to_request();
            match expects_json {
                Some(json) => {
                    next.messages.push(Message::assistant(response.text.clone()));
                    next.messages.push(Message::user(reask_message(&problems, json)));
                }
                None => {
                    next.messages.push(Message::assistant(tool_calls_as_text(response)));
                    next.messages.push(Message::user(tool_reask_message(&problems)));
                }
            }
            call.steps.push(Step::Reask {
                tier,
                at_ms,
                reason: ReaskReason::ChecksFailed { problems },
            });
            Checked::Reask(Box::new(next))
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
