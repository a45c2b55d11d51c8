//! Caller deadlines shorter than the route's, on paused time: one table of rows through one
//! `check` helper. The route has the spec's clocks (deadline 20 s, attempt and minimum attempt
//! 8 s, first token 4 s, two attempts per tier, first backoff 300 ms). A shorter deadline
//! shrinks the attempts to fit instead of skipping them: the call's first attempt always starts
//! with its clocks cut to what is left, and a retry or a later tier needs the route's share of
//! the call's deadline (8/20 of it: 2 s of a 5 s call, 3.2 s of an 8 s one). Regression: any
//! `x-rein-deadline-ms` of 8000 or less got the degraded reply at once on a healthy route.

use std::time::Duration;

use rein_core::*;

use crate::support::*;

struct Row {
    name: &'static str,
    deadline_ms: u64,
    primary: Vec<Act>,
    fallback: Vec<Act>,
    outcome: Outcome,
    /// Attempts on (primary, fallback).
    attempts: (usize, usize),
    elapsed_ms: u64,
    /// The clock that ended the first attempt, when one did.
    fired: Option<Clock>,
}

fn row(
    name: &'static str,
    deadline_ms: u64,
    primary: Vec<Act>,
    outcome: Outcome,
    attempts: (usize, usize),
    elapsed_ms: u64,
) -> Row {
    Row {
        name,
        deadline_ms,
        primary,
        fallback: vec![ok()],
        outcome,
        attempts,
        elapsed_ms,
        fired: None,
    }
}

impl Row {
    fn fired(mut self, clock: Clock) -> Self {
        self.fired = Some(clock);
        self
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// An error response with this status after this delay.
fn status_after(delay_ms: u64, code: u16) -> Act {
    Act::HttpAfter(
        ms(delay_ms),
        HttpError { status: code, message: format!("status {code}"), ..HttpError::default() },
    )
}

fn rows() -> Vec<Row> {
    use Outcome::*;
    vec![
        row("5 s, healthy: the answer", 5000, vec![ok()], Answered, (1, 0), 0),
        row(
            "8 s (the minimum attempt), healthy: the answer",
            8000,
            vec![ok()],
            Answered,
            (1, 0),
            0,
        ),
        row("1 s, healthy: the answer", 1000, vec![ok()], Answered, (1, 0), 0),
        row(
            "5 s, a slow but healthy answer inside the deadline",
            5000,
            vec![Act::Ok { first_token: ms(3000), token_delay: ms(200) }],
            Answered,
            (1, 0),
            4000,
        ),
        // 10 ms, then a 300 ms wait: 4690 ms left, more than the 2 s a retry needs.
        row(
            "5 s, a fast 503 is retried within the call's share",
            5000,
            vec![status_after(10, 503), ok()],
            Answered,
            (2, 0),
            310,
        ),
        row(
            "5 s, a tier that fails fast: the next tier answers",
            5000,
            vec![status_after(10, 401)],
            Fallback,
            (1, 1),
            10,
        ),
        row(
            "8 s, persistent 503: both attempts, then the fallback's share still fits",
            8000,
            vec![status_after(10, 503)],
            Fallback,
            (2, 1),
            320,
        ),
        // Negative: 1.5 s left at 3.5 s is less than a retry's 2 s share, and less than the
        // fallback's: no attempt starts that the deadline would cut short.
        row(
            "5 s, a 503 at 3.5 s leaves too little for any other attempt",
            5000,
            vec![status_after(3500, 503), ok()],
            Degraded,
            (1, 0),
            3500,
        ),
        row(
            "5 s, a silent provider: the first-token clock, then no room",
            5000,
            vec![Act::Hang],
            Degraded,
            (1, 0),
            4000,
        )
        .fired(Clock::FirstToken),
        row(
            "3 s, a silent provider: the first-token clock shrinks to the deadline",
            3000,
            vec![Act::Hang],
            Degraded,
            (1, 0),
            3000,
        )
        .fired(Clock::FirstToken),
        row(
            "2 s, a slow stream: the attempt cap shrinks to the deadline",
            2000,
            vec![Act::Ok { first_token: Duration::ZERO, token_delay: ms(1500) }],
            Degraded,
            (1, 0),
            2000,
        )
        .fired(Clock::Attempt),
    ]
}

async fn check(row: Row) {
    let name = row.name;
    let primary = Scripted::new("p", WireFormat::OpenAi, row.primary.clone());
    let fallback = Scripted::new("f", WireFormat::Anthropic, row.fallback.clone());
    let engine = engine(vec![route(
        "r",
        vec![("primary", primary.clone()), ("fallback", fallback.clone())],
    )]);
    let ctx = CallContext::with_deadline(ms(row.deadline_ms));
    let started = tokio::time::Instant::now();
    let done = engine.complete(ctx, "r", ChatRequest::default()).await.unwrap();
    let elapsed = started.elapsed();

    assert_eq!(done.outcome(), row.outcome, "{name}: {:?}", done.report.steps);
    assert_eq!(elapsed, ms(row.elapsed_ms), "{name}: virtual elapsed time");
    assert!(elapsed <= ms(row.deadline_ms), "{name}: inside the deadline");
    assert_eq!(
        (primary.arrivals().len(), fallback.arrivals().len()),
        row.attempts,
        "{name}: attempts seen by the providers"
    );
    let fired = done.report.attempts().next().and_then(|a| match &a.failure {
        Some(Failure::ClockFired { clock, .. }) => Some(*clock),
        _ => None,
    });
    assert_eq!(fired, row.fired, "{name}: the clock that ended the first attempt");
    if matches!(row.outcome, Outcome::Answered | Outcome::Fallback) {
        assert_eq!(done.response.text, full_text(), "{name}: the whole answer");
    }
}

#[tokio::test(start_paused = true)]
async fn short_caller_deadlines() {
    for row in rows() {
        check(row).await;
    }
}

/// On the real clock time passes between making the deadline and the first check, which paused
/// time hides: a deadline at or under the minimum attempt must still get its answer.
#[tokio::test]
async fn on_the_real_clock_a_short_deadline_still_gets_its_answer() {
    for deadline_ms in [1000, 5000, 8000, 20_000] {
        let primary = Scripted::new("p", WireFormat::OpenAi, vec![ok()]);
        let fallback = Scripted::new("f", WireFormat::Anthropic, vec![ok()]);
        let engine = engine(vec![route("r", vec![("primary", primary), ("fallback", fallback)])]);
        let ctx = CallContext::with_deadline(ms(deadline_ms));
        let done = engine.complete(ctx, "r", ChatRequest::default()).await.unwrap();
        assert_eq!(done.outcome(), Outcome::Answered, "{deadline_ms} ms: {:?}", done.report.steps);
        assert_eq!(done.response.text, full_text(), "{deadline_ms} ms");
    }
}
