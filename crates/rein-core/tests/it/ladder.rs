//! The validation ladder's cases in the fault matrix, on paused time: one table of rows, each
//! with what the tiers answer and what must come out (outcome, attempts per tier, re-asks, code
//! repairs), run through one `check` helper. The route is the spec's support agent: a JSON
//! answer with cited article ids, checked against what search returned in this run.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rein_core::validate::*;
use rein_core::*;
use serde_json::json;

use crate::support::*;

fn schema() -> CompiledSchema {
    CompiledSchema::new(&json!({
        "type": "object",
        "required": ["reply", "article_ids", "needs_human"],
        "additionalProperties": false,
        "properties": {
            "reply": {"type": "string"},
            "article_ids": {"type": "array", "items": {"type": "string"}},
            "order_id": {"type": "string"},
            "needs_human": {"type": "boolean"},
            "reason": {"type": "string", "enum": ["refund", "delivery", "other"]}
        }
    }))
    .unwrap()
}

fn citations() -> CitedIdsReturned {
    CitedIdsReturned {
        ids_at: "/article_ids".into(),
        source: Some("search".into()),
        item: "article".into(),
    }
}

fn numbers() -> NumbersInCitedText {
    NumbersInCitedText {
        text_at: Some("/reply".into()),
        ids_at: Some("/article_ids".into()),
        item: "article".into(),
    }
}

fn evidence() -> Evidence {
    Evidence::new()
        .with(EvidenceItem::new("search", "118", "Deliveries to hospitals go to the front desk."))
        .with(EvidenceItem::new("search", "140", "Changes close 48 hours before delivery."))
}

const GOOD: &str = r#"{"reply":"Changes close 48 hours before delivery.","article_ids":["140"],"needs_human":false}"#;
const INVENTED: &str = r#"{"reply":"Changes close 48 hours before delivery.","article_ids":["212"],"needs_human":false}"#;
const WRONG_NUMBER: &str = r#"{"reply":"Changes close 24 hours before delivery.","article_ids":["140"],"needs_human":false}"#;
const CUT: &str = r#"{"reply":"Changes close 48 hours before deli"#;

/// A rule whose backend never answers in time, as a webhook that times out reports itself.
struct Unavailable;

impl Rule for Unavailable {
    fn name(&self) -> &str {
        "policy_webhook"
    }
    fn check<'a>(&'a self, _: &'a CallContext, _: &'a Answer) -> BoxFuture<'a, Vec<Problem>> {
        Box::pin(async {
            vec![Problem::rule_unavailable("policy_webhook", "timed out after 500 ms")]
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    Answered,
    Fallback,
    Degraded,
    Declined,
    Filtered,
}

struct Row {
    name: &'static str,
    primary: Vec<Act>,
    fallback: Vec<Act>,
    expect: Expect,
    attempts: (usize, usize),
    reasks: usize,
    repairs: usize,
    /// Rules in force (the citation and numbers rules unless a row says otherwise).
    rules: RuleSet,
    /// Text the re-ask must contain, when there is one.
    reask_says: &'static [&'static str],
}

fn row(
    name: &'static str,
    primary: Vec<Act>,
    fallback: Vec<Act>,
    expect: Expect,
    attempts: (usize, usize),
) -> Row {
    Row {
        name,
        primary,
        fallback,
        expect,
        attempts,
        reasks: 0,
        repairs: 0,
        rules: RuleSet::new().with(citations()).with(numbers()),
        reask_says: &[],
    }
}

impl Row {
    fn reasks(mut self, n: usize, says: &'static [&'static str]) -> Self {
        self.reasks = n;
        self.reask_says = says;
        self
    }
    fn repairs(mut self, n: usize) -> Self {
        self.repairs = n;
        self
    }
    fn rules(mut self, rules: RuleSet) -> Self {
        self.rules = rules;
        self
    }
}

fn rows() -> Vec<Row> {
    use Expect::*;
    let fenced = format!("```json\n{GOOD}\n```");
    let enum_case = r#"{"reply":"Changes close 48 hours before delivery.","article_ids":["140"],"needs_human":false,"reason":"Refund"}"#;
    vec![
        row("a good answer passes", vec![say(GOOD)], vec![say(GOOD)], Answered, (1, 0)),
        row(
            "cut-off JSON is never parsed: asked again with a doubled ceiling",
            vec![Act::Say(CUT.into(), StopReason::MaxTokens), say(GOOD)],
            vec![say(GOOD)],
            Answered,
            (2, 0),
        )
        .reasks(1, &[]),
        row(
            "code-fenced JSON is repaired in code, no second call",
            vec![say(&fenced)],
            vec![say(GOOD)],
            Answered,
            (1, 0),
        )
        .repairs(1),
        row(
            "an enum's letter case is fixed in code",
            vec![say(enum_case)],
            vec![say(GOOD)],
            Answered,
            (1, 0),
        )
        .repairs(1),
        row(
            "an invented citation gets one re-ask naming the allowed ids",
            vec![say(INVENTED), say(GOOD)],
            vec![say(GOOD)],
            Answered,
            (2, 0),
        )
        .reasks(1, &["212", "118", "140"]),
        row(
            "a wrong number (24 vs 48) gets a re-ask",
            vec![say(WRONG_NUMBER), say(GOOD)],
            vec![say(GOOD)],
            Answered,
            (2, 0),
        )
        .reasks(1, &["24"]),
        row(
            "the re-ask fails again: the next tier answers",
            vec![say(INVENTED)],
            vec![say(GOOD)],
            Fallback,
            (2, 1),
        )
        .reasks(1, &["212"]),
        row(
            "every tier fails its checks: the safe reply",
            vec![say(INVENTED)],
            vec![say(WRONG_NUMBER)],
            Degraded,
            (2, 1),
        )
        .reasks(1, &["212"]),
        row(
            "a refusal gets the safe reply",
            vec![Act::Say(String::new(), StopReason::Refusal)],
            vec![say(GOOD)],
            Declined,
            (1, 0),
        ),
        row(
            "a content filter stop reaches the caller",
            vec![Act::Say(String::new(), StopReason::ContentFilter)],
            vec![say(GOOD)],
            Filtered,
            (1, 0),
        ),
        row(
            "a rule whose backend times out is a failed check, not a pass",
            vec![say(GOOD)],
            vec![say(GOOD)],
            Degraded,
            (2, 1),
        )
        .rules(RuleSet::new().with(Unavailable))
        .reasks(1, &["policy_webhook"]),
        // Negative: with the citation rule disabled the invented citation goes through
        // unnoticed (schema and parse are happy with it), which proves the rule is what catches
        // it above. The numbers rule is off too: it reads the cited text, which for an invented
        // article is empty, so it would catch this answer by accident.
        row(
            "with the citation rule disabled the invented citation passes",
            vec![say(INVENTED)],
            vec![say(GOOD)],
            Answered,
            (1, 0),
        )
        .rules(RuleSet::new().with(citations()).without(CitedIdsReturned::NAME)),
    ]
}

async fn check(row: Row) {
    let name = row.name;
    let primary = Scripted::new("p", WireFormat::OpenAi, row.primary.clone());
    let fallback = Scripted::new("f", WireFormat::Anthropic, row.fallback.clone());
    let mut route = route("r", vec![("primary", primary.clone()), ("fallback", fallback.clone())]);
    route.contract = Some(OutputContract::json(Some(schema())).with_rules(row.rules.clone()));
    route.max_tokens_cap = 4000;
    let engine = engine(vec![route]);
    let request = ChatRequest {
        max_tokens: Some(500),
        messages: vec![Message::user("Can I change my order?")],
        ..ChatRequest::default()
    };
    let ctx = CallContext::new().evidence(evidence());
    let result = engine.complete(ctx, "r", request).await;

    assert_eq!(
        (primary.requests().len(), fallback.requests().len()),
        row.attempts,
        "{name}: calls the providers saw"
    );
    let report = match (&result, row.expect) {
        (Ok(done), Expect::Answered | Expect::Fallback) => {
            let outcome =
                if row.expect == Expect::Answered { Outcome::Answered } else { Outcome::Fallback };
            assert_eq!(done.outcome(), outcome, "{name}");
            let value: serde_json::Value = serde_json::from_str(&done.response.text)
                .unwrap_or_else(|e| {
                    panic!("{name}: the answer used is plain JSON: {e}: {}", done.response.text)
                });
            assert!(value.get("reply").is_some(), "{name}");
            &done.report
        }
        (Ok(done), Expect::Degraded) => {
            assert_eq!(done.outcome(), Outcome::Degraded, "{name}");
            &done.report
        }
        (Ok(done), Expect::Declined) => {
            assert_eq!(done.outcome(), Outcome::Declined, "{name}");
            assert_eq!(
                done.response.text,
                DegradedReply::default().fallback_text,
                "{name}: the safe reply"
            );
            &done.report
        }
        (Err(CallError::ContentFilter { report, .. }), Expect::Filtered) => report,
        (other, expect) => panic!("{name}: expected {expect:?}, got {other:?}"),
    };
    assert_eq!(report.reask_count(), row.reasks, "{name}: re-asks (never more than one per kind)");
    assert_eq!(report.repairs().len(), row.repairs, "{name}: code repairs");
    // A re-ask sends the failed output and the exact problem.
    let reasks: Vec<ChatRequest> = primary.requests().into_iter().skip(1).collect();
    for needle in row.reask_says {
        let said =
            reasks.iter().any(|r| r.messages.last().is_some_and(|m| m.content.contains(needle)));
        assert!(said, "{name}: the re-ask names `{needle}`: {reasks:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn ladder_matrix() {
    for row in rows() {
        check(row).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_off_answer_is_asked_again_with_double_the_ceiling_once() {
    let primary =
        Scripted::new("p", WireFormat::OpenAi, vec![Act::Say(CUT.into(), StopReason::MaxTokens)]);
    let fallback = Scripted::new("f", WireFormat::Anthropic, vec![say(GOOD)]);
    let mut route = route("r", vec![("primary", primary.clone()), ("fallback", fallback.clone())]);
    route.contract = Some(OutputContract::json(Some(schema())));
    route.max_tokens_cap = 1500;
    let engine = engine(vec![route]);
    let request = ChatRequest { max_tokens: Some(500), ..ChatRequest::default() };
    let done = engine.complete(CallContext::new(), "r", request).await.unwrap();
    let ceilings: Vec<Option<u32>> = primary.requests().iter().map(|r| r.max_tokens).collect();
    assert_eq!(ceilings, vec![Some(500), Some(1000)], "doubled once, never a third time");
    assert_eq!(done.outcome(), Outcome::Fallback, "still cut off: the next tier answers");
    assert!(done.report.steps.iter().any(|s| matches!(s, Step::Checked { verdict: "cut_off", problems, .. } if problems.is_empty())),
        "a cut-off answer is never parsed, so it has no parse problems");
}

#[tokio::test(start_paused = true)]
async fn a_repair_never_runs_twice_in_one_call() {
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![say(INVENTED)]);
    let fallback = Scripted::new("f", WireFormat::Anthropic, vec![say(INVENTED)]);
    let mut route = route("r", vec![("primary", primary.clone()), ("fallback", fallback.clone())]);
    route.contract =
        Some(OutputContract::json(Some(schema())).with_rules(RuleSet::new().with(citations())));
    let engine = engine(vec![route]);
    let ctx = CallContext::new().evidence(evidence());
    let done = engine.complete(ctx, "r", ChatRequest::default()).await.unwrap();
    assert_eq!(done.report.reask_count(), 1);
    assert_eq!(fallback.requests().len(), 1, "the fallback tier gets no second re-ask");
    assert_eq!(done.outcome(), Outcome::Degraded);
}

#[tokio::test(start_paused = true)]
async fn passthrough_streams_are_checked_after_the_fact_and_recorded() {
    use futures_util::StreamExt;
    let primary = Scripted::new(
        "p",
        WireFormat::OpenAi,
        vec![Act::SayAfter(INVENTED.into(), Duration::from_millis(10))],
    );
    let mut route = route("r", vec![("primary", primary.clone())]);
    route.release = ReleaseMode::Passthrough;
    route.contract =
        Some(OutputContract::json(Some(schema())).with_rules(RuleSet::new().with(citations())));
    let engine = Arc::new(engine(vec![route]));
    let ctx = CallContext::new().evidence(evidence());
    let mut stream = engine.stream(ctx, "r", ChatRequest::default()).unwrap();
    let mut end = None;
    while let Some(item) = stream.next().await {
        if !matches!(item, Released::Event(_)) {
            end = Some(item);
        }
    }
    let Some(Released::Completed(done)) = end else { panic!("{end:?}") };
    assert_eq!(primary.requests().len(), 1, "it cannot be un-sent, so no re-ask");
    assert!(
        done.report
            .steps
            .iter()
            .any(|s| matches!(s, Step::Checked { verdict: "fail", recorded_only: true, .. }))
    );
}

#[tokio::test(start_paused = true)]
async fn the_callers_response_format_schema_is_checked_by_rein_too() {
    let missing_field =
        r#"{"reply":"Changes close 48 hours before delivery.","needs_human":false}"#;
    let primary = Scripted::new("p", WireFormat::OpenAi, vec![say(missing_field), say(GOOD)]);
    let engine = engine(vec![route("r", vec![("primary", primary.clone())])]);
    let request = ChatRequest {
        response_format: Some(ResponseFormat::JsonSchema {
            name: "answer".into(),
            schema: schema().source().clone(),
            strict: true,
        }),
        ..ChatRequest::default()
    };
    let done = engine.complete(CallContext::new(), "r", request).await.unwrap();
    assert_eq!(done.report.reask_count(), 1, "the provider's strict decoding is not trusted");
    assert_eq!(primary.requests().len(), 2);
    assert!(primary.requests()[1].messages.last().unwrap().content.contains("article_ids"));
    assert_eq!(done.response.text, GOOD);
}

/// An engine whose route `r` is checked by a judge route `judge` answering `verdicts` in turn.
fn judged(
    answers: Vec<Act>,
    verdicts: Vec<Act>,
    fail: bool,
) -> (Engine, std::sync::Arc<Scripted>, std::sync::Arc<Scripted>) {
    let primary = Scripted::new("p", WireFormat::OpenAi, answers);
    let judge = Scripted::new("j", WireFormat::OpenAi, verdicts);
    let engine = engine(vec![route("judge", vec![("judge", judge.clone())])]);
    let mut main = route("r", vec![("primary", primary.clone())]);
    let mut contract =
        OutputContract::text().with_rules(RuleSet::new().with(JudgeRule::new(&engine, "judge")));
    if !fail {
        contract = contract.with_fail_open(JudgeRule::advisory());
    }
    main.contract = Some(contract);
    engine.replace_routes(vec![route("judge", vec![("judge", judge.clone())]), main]);
    (engine, primary, judge)
}

#[tokio::test(start_paused = true)]
async fn a_judge_that_fails_the_answer_sends_it_back_once() {
    let (engine, primary, judge) = judged(
        vec![say("Changes close 24 hours before.")],
        vec![say("not_supported"), say("supported")],
        true,
    );
    let ctx = CallContext::new().evidence(evidence());
    let done = engine.complete(ctx, "r", ChatRequest::default()).await.unwrap();
    assert_eq!(done.outcome(), Outcome::Answered);
    assert_eq!(done.report.reask_count(), 1);
    assert_eq!((primary.requests().len(), judge.requests().len()), (2, 2));
    let asked = &judge.requests()[0].messages[0].content;
    assert!(
        asked.contains("Changes close 48 hours") && asked.contains("24 hours"),
        "the judge reads answer and evidence: {asked}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_advisory_judge_is_recorded_but_does_not_fail_the_answer() {
    let (engine, primary, _) =
        judged(vec![say("Changes close 24 hours before.")], vec![say("not_supported")], false);
    let done = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap();
    assert_eq!((done.outcome(), primary.requests().len()), (Outcome::Answered, 1));
    let recorded = done.report.steps.iter().any(|step| {
        matches!(step, Step::Checked { verdict: "pass", failed_open, .. } if failed_open.iter().any(|p| p.kind == ProblemKind::Rule(JUDGE_RULE.into())))
    });
    assert!(recorded, "the judge's verdict is recorded: {:?}", done.report.steps);
}

#[tokio::test(start_paused = true)]
async fn a_judge_that_cannot_answer_is_a_failed_check() {
    let (engine, _, _) =
        judged(vec![say("Changes close 48 hours before.")], vec![status(503)], true);
    let done = engine.complete(CallContext::new(), "r", ChatRequest::default()).await.unwrap();
    assert_eq!(done.outcome(), Outcome::Degraded, "never a pass by default");
}

/// The bug this guards: the judge ran on a fresh route deadline of its own, so a call with two
/// seconds left could wait on its judge for the judge route's whole 20 s.
#[tokio::test(start_paused = true)]
async fn a_judge_never_outlives_the_callers_deadline() {
    let slow_verdict = Act::SayAfter("supported".into(), Duration::from_millis(5_000));
    for fail in [true, false] {
        let (engine, primary, judge) =
            judged(vec![say("Changes close 48 hours before.")], vec![slow_verdict.clone()], fail);
        let started = tokio::time::Instant::now();
        let ctx = CallContext::with_deadline(Duration::from_millis(2_000)).evidence(evidence());
        let done = engine.complete(ctx, "r", ChatRequest::default()).await.unwrap();
        let elapsed = started.elapsed();
        assert!(
            elapsed <= Duration::from_millis(2_000),
            "ended inside the caller's 2 s, took {elapsed:?}"
        );
        assert_eq!(judge.requests().len(), 1, "the judge was asked, inside the deadline");
        let unavailable = done.report.steps.iter().any(|step| {
            matches!(step, Step::Checked { problems, failed_open, .. }
                if problems.iter().chain(failed_open).any(|p| p.kind == ProblemKind::RuleUnavailable(JUDGE_RULE.into())))
        });
        assert!(
            unavailable,
            "the check that could not finish is recorded: {:?}",
            done.report.steps
        );
        // A check that could not finish is a failed check even for an advisory judge (only its
        // verdict fails open): no time is left for the re-ask, so the call takes the safe reply.
        assert_eq!(done.outcome(), Outcome::Degraded, "{:?}", done.report.steps);
        assert_eq!(primary.requests().len(), 1);
    }
}
