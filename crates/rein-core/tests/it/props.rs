//! Property: whatever the providers do, every call ends within its deadline with a whole
//! answer, the degraded reply or a typed error; never a hang, never a truncated success.

use std::time::Duration;

use proptest::prelude::*;
use rein_core::*;

use crate::support::*;

/// The result of a released stream, checking that what was streamed is what completed.
async fn released(mut stream: ReleaseStream) -> Result<Completion, CallError> {
    use futures_util::StreamExt;
    let mut text = String::new();
    while let Some(item) = stream.next().await {
        match item {
            Released::Event(StreamEvent::TextDelta { text: t }) => text.push_str(&t),
            Released::Event(_) => {}
            Released::Completed(done) => {
                assert_eq!(
                    text, done.response.text,
                    "streamed text differs from the completed answer"
                );
                return Ok(*done);
            }
            Released::Failed(error) => return Err(*error),
        }
    }
    panic!("released stream ended without Completed or Failed");
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        Just(ok()),
        (0u64..6000, 0u64..2500).prop_map(|(first, gap)| Act::Ok {
            first_token: Duration::from_millis(first),
            token_delay: Duration::from_millis(gap),
        }),
        prop::sample::select(vec![408u16, 409, 429, 500, 503, 529, 400, 401, 403, 404, 413])
            .prop_map(status),
        (0u64..40_000).prop_map(|ms| retry_after(429, Duration::from_millis(ms))),
        Just(http(429, "insufficient_quota", Some("insufficient_quota"), "quota")),
        Just(http(400, "invalid_request_error", Some("context_length_exceeded"), "too long")),
        Just(http(
            400,
            "invalid_request_error",
            Some("content_policy_violation"),
            "content policy"
        )),
        Just(Act::Reset),
        Just(Act::Hang),
        (0usize..6).prop_map(Act::CutAfter),
        (0usize..6).prop_map(Act::StallAfter),
        (0usize..6).prop_map(Act::MalformedAfter),
        (0usize..6).prop_map(Act::StreamErrorAfter),
        any::<bool>().prop_map(|stall| Act::NoDone { stall }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_call_ends_in_time_with_an_honest_result(
        primary in prop::collection::vec(act(), 1..5),
        fallback in prop::collection::vec(act(), 1..5),
        deadline_ms in 1_000u64..30_000,
        passthrough in any::<bool>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        runtime.block_on(async move {
            let p = Scripted::new("p", WireFormat::OpenAi, primary);
            let f = Scripted::new("f", WireFormat::Anthropic, fallback);
            let mut route = route("r", vec![("primary", p), ("fallback", f)]);
            route.release = if passthrough { ReleaseMode::Passthrough } else { ReleaseMode::Checked };
            let engine = engine(vec![route]);
            let deadline = Duration::from_millis(deadline_ms);
            let ctx = CallContext::with_deadline(deadline);
            let started = tokio::time::Instant::now();
            let result = if passthrough {
                released(engine.stream(ctx, "r", ChatRequest::default()).unwrap()).await
            } else {
                engine.complete(ctx, "r", ChatRequest::default()).await
            };
            let elapsed = started.elapsed();
            prop_assert!(elapsed <= deadline.min(Duration::from_secs(20)), "took {elapsed:?} with a {deadline:?} deadline");
            match result {
                Ok(done) => match done.outcome() {
                    Outcome::Answered | Outcome::Fallback => {
                        prop_assert_eq!(done.response.text, full_text());
                        prop_assert_eq!(done.response.stop_reason, Some(StopReason::EndTurn));
                    }
                    Outcome::Degraded => prop_assert_eq!(done.response.model, "rein-degraded"),
                    other => prop_assert!(false, "unexpected outcome {other:?}"),
                },
                Err(CallError::ContentPolicy { .. } | CallError::ContextLength { .. }) => {}
                // Only a passthrough stream may fail after its first token, and it says so.
                Err(CallError::Interrupted { .. }) if passthrough => {}
                Err(other) => prop_assert!(false, "unexpected error {other:?}"),
            }
            Ok(())
        })?;
    }
}
