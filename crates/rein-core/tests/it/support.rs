//! A scripted provider for engine tests: each call plays the next act of its script (the last
//! act repeats), with every delay on tokio's clock so tests run on paused time. It records when
//! each request arrived, as the provider saw it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, StreamExt};
use rein_core::*;
use tokio::time::Instant;

/// The words of every healthy scripted answer; a truncated answer is detectably shorter.
pub(crate) const WORDS: [&str; 6] = ["the ", "order ", "ships ", "in ", "two ", "days."];

pub(crate) fn full_text() -> String {
    WORDS.concat()
}

/// What one call to the scripted provider does.
#[derive(Debug, Clone)]
pub(crate) enum Act {
    /// A healthy answer, each token `token_delay` apart after `first_token` delay.
    Ok { first_token: Duration, token_delay: Duration },
    /// An error response with this status and body.
    Http(HttpError),
    /// Connection reset before headers.
    Reset,
    /// Never send headers.
    Hang,
    /// Send `n` tokens, then close without a stop reason.
    CutAfter(usize),
    /// Send `n` tokens, then nothing, with the connection open.
    StallAfter(usize),
    /// Send `n` tokens, then an unparseable chunk.
    MalformedAfter(usize),
    /// Send `n` tokens, then an error event.
    StreamErrorAfter(usize),
    /// Send `n` tokens, then an error event of this type (a Bedrock exception frame's
    /// `:exception-type`, say) and message.
    StreamErrorTypedAfter(usize, &'static str, &'static str),
    /// Send `n` tokens, then the Responses API's `response.failed` with this error code and
    /// message.
    ResponseFailedAfter(usize, &'static str, &'static str),
    /// A complete answer with its stop reason but no terminator; `stall` keeps it open.
    NoDone { stall: bool },
    /// An answer that stops with this reason.
    StopWith(StopReason),
    /// Healthy after `t` since the provider was made, this status before.
    DownUntil(Duration, u16),
    /// Answer exactly this text, stopping for this reason.
    Say(String, StopReason),
    /// Answer this text after this delay.
    SayAfter(String, Duration),
    /// A turn that calls tools: `(name, arguments as written)` each, stopping for this reason.
    Call(Vec<(String, String)>, StopReason),
    /// This error response, after this delay.
    HttpAfter(Duration, HttpError),
}

/// A turn that calls one tool with these arguments and stops to wait for its result.
pub(crate) fn call(name: &str, arguments: &str) -> Act {
    Act::Call(vec![(name.to_string(), arguments.to_string())], StopReason::ToolUse)
}

/// An answer with this text that ends normally.
pub(crate) fn say(text: &str) -> Act {
    Act::Say(text.to_string(), StopReason::EndTurn)
}

pub(crate) fn ok() -> Act {
    Act::Ok { first_token: Duration::ZERO, token_delay: Duration::ZERO }
}

pub(crate) fn status(code: u16) -> Act {
    Act::Http(HttpError { status: code, message: format!("status {code}"), ..HttpError::default() })
}

pub(crate) fn http(code: u16, error_type: &str, error_code: Option<&str>, message: &str) -> Act {
    Act::Http(HttpError {
        status: code,
        error_type: Some(error_type.to_string()),
        code: error_code.map(str::to_string),
        message: message.to_string(),
        ..HttpError::default()
    })
}

pub(crate) fn retry_after(code: u16, wait: Duration) -> Act {
    Act::Http(HttpError {
        status: code,
        message: "slow down".into(),
        retry_after: Some(wait),
        ..HttpError::default()
    })
}

#[derive(Debug)]
pub(crate) struct Scripted {
    name: String,
    format: WireFormat,
    script: Mutex<VecDeque<Act>>,
    born: Instant,
    /// Arrival time of every request, since the provider was made.
    pub arrivals: Mutex<Vec<Duration>>,
    /// Every request received, in order.
    pub requests: Mutex<Vec<ChatRequest>>,
}

impl Scripted {
    pub(crate) fn new(name: &str, format: WireFormat, script: Vec<Act>) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_string(),
            format,
            script: Mutex::new(script.into()),
            born: Instant::now(),
            arrivals: Mutex::new(Vec::new()),
            requests: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn requests(&self) -> Vec<ChatRequest> {
        self.requests.lock().unwrap().clone()
    }

    pub(crate) fn arrivals(&self) -> Vec<Duration> {
        self.arrivals.lock().unwrap().clone()
    }

    fn next_act(&self) -> Act {
        let mut script = self.script.lock().unwrap();
        if script.len() > 1 {
            script.pop_front().unwrap()
        } else {
            script.front().cloned().unwrap_or_else(ok)
        }
    }
}

type Item = Result<StreamEvent, Failure>;

/// A planned stream: each item after its delay; `None` stalls forever.
fn planned(plan: Vec<(Duration, Option<Item>)>) -> EventStream {
    stream::unfold(VecDeque::from(plan), |mut plan| async move {
        let (delay, item) = plan.pop_front()?;
        tokio::time::sleep(delay).await;
        match item {
            Some(item) => Some((item, plan)),
            None => std::future::pending().await,
        }
    })
    .boxed()
}

fn tokens(n: usize, first: Duration, gap: Duration) -> Vec<(Duration, Option<Item>)> {
    let mut plan = vec![(
        Duration::ZERO,
        Some(Ok(StreamEvent::Start { id: "r".into(), model: "scripted".into() })),
    )];
    for (i, word) in WORDS.iter().cycle().take(n).enumerate() {
        let delay = if i == 0 { first } else { gap };
        plan.push((delay, Some(Ok(StreamEvent::TextDelta { text: word.to_string() }))));
    }
    plan
}

fn said(text: &str, delay: Duration) -> Vec<(Duration, Option<Item>)> {
    vec![
        (Duration::ZERO, Some(Ok(StreamEvent::Start { id: "r".into(), model: "scripted".into() }))),
        (delay, Some(Ok(StreamEvent::TextDelta { text: text.to_string() }))),
    ]
}

fn called(calls: &[(String, String)]) -> Vec<(Duration, Option<Item>)> {
    let mut plan = vec![(
        Duration::ZERO,
        Some(Ok(StreamEvent::Start { id: "r".into(), model: "scripted".into() })),
    )];
    for (index, (name, arguments)) in calls.iter().enumerate() {
        let index = index as u32;
        let id = format!("call_{index}");
        let name = name.clone();
        let arguments = arguments.clone();
        plan.push((Duration::ZERO, Some(Ok(StreamEvent::ToolCallStart { index, id, name }))));
        plan.push((Duration::ZERO, Some(Ok(StreamEvent::ToolCallDelta { index, arguments }))));
    }
    plan
}

fn finished(
    mut plan: Vec<(Duration, Option<Item>)>,
    reason: StopReason,
    done: bool,
) -> Vec<(Duration, Option<Item>)> {
    plan.push((Duration::ZERO, Some(Ok(StreamEvent::Stop { reason }))));
    plan.push((
        Duration::ZERO,
        Some(Ok(StreamEvent::Usage { usage: Usage { input_tokens: 5, output_tokens: 6 } })),
    ));
    if done {
        plan.push((Duration::ZERO, Some(Ok(StreamEvent::Done))));
    }
    plan
}

impl Provider for Scripted {
    fn name(&self) -> &str {
        &self.name
    }

    fn format(&self) -> WireFormat {
        self.format
    }

    fn send(&self, request: &ChatRequest) -> BoxFuture<'static, Result<EventStream, Failure>> {
        let now = Instant::now().saturating_duration_since(self.born);
        self.arrivals.lock().unwrap().push(now);
        self.requests.lock().unwrap().push(request.clone());
        let mut act = self.next_act();
        if let Act::DownUntil(until, code) = act {
            act = if now < until { status(code) } else { ok() };
        }
        let format = self.format;
        let n = WORDS.len();
        Box::pin(async move {
            let plan = match act {
                Act::Ok { first_token, token_delay } => {
                    finished(tokens(n, first_token, token_delay), StopReason::EndTurn, true)
                }
                Act::Http(http) => return Err(Failure::Http { format, http }),
                Act::HttpAfter(delay, http) => {
                    tokio::time::sleep(delay).await;
                    return Err(Failure::Http { format, http });
                }
                Act::Reset => {
                    return Err(Failure::Connection { detail: "connection reset".into() });
                }
                Act::Hang => std::future::pending().await,
                Act::CutAfter(k) => tokens(k, Duration::ZERO, Duration::ZERO),
                Act::StallAfter(k) => {
                    let mut plan = tokens(k, Duration::ZERO, Duration::ZERO);
                    plan.push((Duration::ZERO, None));
                    plan
                }
                Act::MalformedAfter(k) => {
                    let mut plan = tokens(k, Duration::ZERO, Duration::ZERO);
                    plan.push((
                        Duration::ZERO,
                        Some(Err(Failure::Malformed { detail: "data: {oops".into() })),
                    ));
                    plan
                }
                Act::StreamErrorTypedAfter(k, error_type, message) => {
                    let mut plan = tokens(k, Duration::ZERO, Duration::ZERO);
                    plan.push((
                        Duration::ZERO,
                        Some(Err(Failure::StreamError {
                            format,
                            error_type: Some(error_type.into()),
                            code: None,
                            message: message.into(),
                        })),
                    ));
                    plan
                }
                Act::StreamErrorAfter(k) => {
                    let mut plan = tokens(k, Duration::ZERO, Duration::ZERO);
                    plan.push((
                        Duration::ZERO,
                        Some(Err(Failure::StreamError {
                            format,
                            error_type: Some("overloaded_error".into()),
                            code: None,
                            message: "Overloaded".into(),
                        })),
                    ));
                    plan
                }
                Act::ResponseFailedAfter(k, code, message) => {
                    let mut plan = tokens(k, Duration::ZERO, Duration::ZERO);
                    plan.push((
                        Duration::ZERO,
                        Some(Err(Failure::StreamError {
                            format,
                            error_type: None,
                            code: Some(code.into()),
                            message: message.into(),
                        })),
                    ));
                    plan
                }
                Act::NoDone { stall } => {
                    let mut plan = finished(
                        tokens(n, Duration::ZERO, Duration::ZERO),
                        StopReason::EndTurn,
                        false,
                    );
                    if stall {
                        plan.push((Duration::ZERO, None));
                    }
                    plan
                }
                Act::StopWith(reason) => {
                    finished(tokens(3, Duration::ZERO, Duration::ZERO), reason, true)
                }
                Act::DownUntil(..) => unreachable!("resolved above"),
                Act::Say(text, reason) => finished(said(&text, Duration::ZERO), reason, true),
                Act::SayAfter(text, delay) => {
                    finished(said(&text, delay), StopReason::EndTurn, true)
                }
                Act::Call(calls, reason) => finished(called(&calls), reason, true),
            };
            Ok(planned(plan))
        })
    }
}

/// A route over scripted providers, one per tier, each with its own provider name.
pub(crate) fn route(name: &str, tiers: Vec<(&str, Arc<Scripted>)>) -> Route {
    let tiers = tiers
        .into_iter()
        .map(|(tier, provider)| {
            Tier::new(tier, provider as Arc<dyn Provider>, format!("{tier}-model"))
        })
        .collect();
    let mut route = Route::new(name, tiers);
    route.degraded = Some(DegradedReply::default());
    route
}

pub(crate) fn engine(routes: Vec<Route>) -> Engine {
    let mut builder =
        Engine::builder().jitter(Arc::new(FixedJitter(0.5))).retry_budget(RetryBudgetPolicy {
            ratio: 0.2,
            min_retries_per_s: 100.0,
            window: Duration::from_secs(10),
        });
    for route in routes {
        builder = builder.route(route);
    }
    builder.build()
}
