//! SLIs: the spec's numbers that count each failure, computed from recorded calls over a window,
//! per route, per tier and per label. One [`CallRecord`] per call (what its report says, plus the
//! labels the caller tagged it with); [`Slis::of`] turns a slice of them into the indicators, by
//! the spec's definitions:
//!
//! - **availability**: the customer got a usable answer inside the deadline, from the primary or
//!   an approved fallback (a clarifying question included), or a clean hand-off; an error, a
//!   timeout or a degraded reply is not available;
//! - **latency** p50 / p95 / p99 to the first visible token and to the end (nearest rank);
//! - **validity on the first try**: answered calls whose first answer passed its checks with no
//!   repair and no re-ask;
//! - **first-try success** (the primary's first attempt) **vs success after retries** (an answer
//!   after more than one attempt, on any tier), per call site;
//! - **fallback beyond plan**: calls a fallback tier served because an earlier one failed (the
//!   failover share's planned calls are not counted), and the **degraded share**;
//! - **escalation rate** by trigger, **coverage** (the share of checked questions answered) and
//!   the **quality score** (the online judge's mean over the sampled calls, each weighted by
//!   1/p of its sampling probability: `rein_core::quality`).
//!
//! [`breakdown`] computes them for every route, every (route, tier) and every (route, label):
//! quiet failures hide in slices, like one question type getting worse while the average holds.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::handoff::Trigger;
use crate::report::Outcome;

/// What one call's record keeps for the SLIs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    pub route: String,
    /// The tier that served it, if one did.
    pub tier: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub outcome: Outcome,
    /// Served by the failover share's tier by plan (not because an earlier tier failed).
    pub failover: bool,
    pub attempts: u32,
    /// Repairs in code and re-asks: the first answer did not pass as it was.
    pub repaired: bool,
    pub elapsed_ms: u64,
    /// To the first token the caller saw (streams), else the end.
    pub first_token_ms: Option<u64>,
    /// The call's deadline.
    pub deadline_ms: u64,
    /// The conversation went to a person, with this trigger.
    pub escalation: Option<Trigger>,
    /// The coverage check ran: whether it let the call answer.
    pub covered: Option<bool>,
    /// The online judge's score, when the call was sampled.
    pub quality: Option<f64>,
    /// The probability the call was sampled for the judge with (its score weighs 1/p in the
    /// quality SLI); `None` counts as 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quality_probability: Option<f64>,
}

impl CallRecord {
    /// The record of a finished call from its report, with the caller's labels and the deadline
    /// it ran on. The escalation, coverage and quality are known to the layers above the engine
    /// (the run's steps, the judge), which set them.
    pub fn of_report(
        report: &crate::report::CallReport,
        labels: BTreeMap<String, String>,
        deadline_ms: u64,
    ) -> Self {
        let served = report.served_by.as_ref();
        Self {
            route: report.route.clone(),
            tier: served.map(|served| served.tier_name.clone()),
            labels,
            outcome: report.outcome,
            failover: served.is_some_and(|served| served.failover),
            attempts: u32::try_from(report.attempt_count()).unwrap_or(u32::MAX),
            repaired: report.reask_count() > 0 || !report.repairs().is_empty(),
            elapsed_ms: report.elapsed_ms,
            first_token_ms: None,
            deadline_ms,
            escalation: None,
            covered: None,
            quality: None,
            quality_probability: None,
        }
    }

    /// The record as JSON, the bytes `serde_json::to_string` writes, written field by field: a
    /// record is written for every call, and serde's serializer around fourteen fields cost
    /// several times the bytes (a test holds the two to the same output).
    pub fn to_json(&self) -> String {
        use crate::json_write::{push_opt_str, push_str, push_u64};
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(b"{\"route\":");
        push_str(&mut out, &self.route);
        out.extend_from_slice(b",\"tier\":");
        push_opt_str(&mut out, self.tier.as_deref());
        out.extend_from_slice(b",\"labels\":{");
        for (at, (key, value)) in self.labels.iter().enumerate() {
            if at > 0 {
                out.push(b',');
            }
            push_str(&mut out, key);
            out.push(b':');
            push_str(&mut out, value);
        }
        out.extend_from_slice(b"},\"outcome\":");
        push_str(&mut out, self.outcome.as_str());
        out.extend_from_slice(b",\"failover\":");
        push_bool(&mut out, self.failover);
        out.extend_from_slice(b",\"attempts\":");
        push_u64(&mut out, u64::from(self.attempts));
        out.extend_from_slice(b",\"repaired\":");
        push_bool(&mut out, self.repaired);
        out.extend_from_slice(b",\"elapsed_ms\":");
        push_u64(&mut out, self.elapsed_ms);
        out.extend_from_slice(b",\"first_token_ms\":");
        match self.first_token_ms {
            Some(ms) => push_u64(&mut out, ms),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"deadline_ms\":");
        push_u64(&mut out, self.deadline_ms);
        out.extend_from_slice(b",\"escalation\":");
        push_opt_str(&mut out, self.escalation.map(Trigger::as_str));
        out.extend_from_slice(b",\"covered\":");
        match self.covered {
            Some(covered) => push_bool(&mut out, covered),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"quality\":");
        push_f64(&mut out, self.quality);
        if self.quality_probability.is_some() {
            out.extend_from_slice(b",\"quality_probability\":");
            push_f64(&mut out, self.quality_probability);
        }
        out.push(b'}');
        // Only whole UTF-8 strings and ASCII were written.
        String::from_utf8(out).unwrap_or_default()
    }

    /// A model answered it (the primary, a fallback, or a planned failover).
    pub fn answered(&self) -> bool {
        matches!(self.outcome, Outcome::Answered | Outcome::Fallback)
    }

    /// A fallback tier served it because an earlier one failed (not by the failover plan).
    pub fn fallback_beyond_plan(&self) -> bool {
        self.outcome == Outcome::Fallback && !self.failover
    }

    /// The customer got something usable in time: an answer, a clarifying question, or a clean
    /// hand-off.
    pub fn available(&self) -> bool {
        let in_time = self.elapsed_ms <= self.deadline_ms;
        let usable = self.answered()
            || self.outcome == Outcome::Clarified
            || self.outcome == Outcome::HandedOff
            || (self.outcome == Outcome::Stopped && self.escalation.is_some());
        usable && in_time
    }
}

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p95: u64,
    pub p99: u64,
}

impl Percentiles {
    /// Nearest-rank percentiles; `None` without samples.
    pub fn of(mut samples: Vec<u64>) -> Option<Percentiles> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let rank = |p: f64| {
            let n = samples.len();
            let index = ((p / 100.0) * n as f64).ceil() as usize;
            samples[index.clamp(1, n) - 1]
        };
        Some(Percentiles { p50: rank(50.0), p95: rank(95.0), p99: rank(99.0) })
    }
}

/// The indicators of one slice of calls. Shares are in [0, 1]; `None` when nothing in the slice
/// could count (no answered call for validity, no checked question for coverage, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slis {
    pub calls: u64,
    pub availability: Option<f64>,
    pub latency_first_token_ms: Option<Percentiles>,
    pub latency_end_ms: Option<Percentiles>,
    pub valid_first_try: Option<f64>,
    /// Answered on the first attempt, of all calls.
    pub success_first_try: Option<f64>,
    /// Answered after a retry or on a later tier, of all calls.
    pub success_after_retries: Option<f64>,
    pub fallback_beyond_plan: Option<f64>,
    pub degraded_share: Option<f64>,
    /// Per trigger, of all calls.
    pub escalation_rate: BTreeMap<String, f64>,
    pub coverage: Option<f64>,
    pub quality: Option<f64>,
}

fn share(count: usize, of: usize) -> Option<f64> {
    (of > 0).then(|| count as f64 / of as f64)
}

impl Slis {
    /// The indicators of `calls`.
    pub fn of(calls: &[&CallRecord]) -> Slis {
        let n = calls.len();
        let count = |keep: &dyn Fn(&CallRecord) -> bool| calls.iter().filter(|c| keep(c)).count();
        let answered: Vec<&&CallRecord> = calls.iter().filter(|c| c.answered()).collect();
        let mut escalation_rate = BTreeMap::new();
        for trigger in Trigger::ALL {
            let fired = count(&|c| c.escalation == Some(trigger));
            if fired > 0 {
                escalation_rate.insert(trigger.as_str().to_string(), fired as f64 / n as f64);
            }
        }
        let checked: Vec<bool> = calls.iter().filter_map(|c| c.covered).collect();
        let scores =
            calls.iter().filter_map(|c| Some((c.quality?, c.quality_probability.unwrap_or(1.0))));
        Slis {
            calls: n as u64,
            availability: share(count(&CallRecord::available), n),
            latency_first_token_ms: Percentiles::of(
                answered.iter().map(|c| c.first_token_ms.unwrap_or(c.elapsed_ms)).collect(),
            ),
            latency_end_ms: Percentiles::of(answered.iter().map(|c| c.elapsed_ms).collect()),
            valid_first_try: share(answered.iter().filter(|c| !c.repaired).count(), answered.len()),
            success_first_try: share(
                count(&|c| c.answered() && c.attempts == 1 && c.outcome == Outcome::Answered),
                n,
            ),
            success_after_retries: share(count(&|c| c.answered() && c.attempts > 1), n),
            fallback_beyond_plan: share(count(&CallRecord::fallback_beyond_plan), n),
            degraded_share: share(count(&|c| c.outcome == Outcome::Degraded), n),
            escalation_rate,
            coverage: share(checked.iter().filter(|covered| **covered).count(), checked.len()),
            quality: crate::quality::weighted_mean(scores),
        }
    }
}

/// Which calls a row of the breakdown counts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "slice", rename_all = "snake_case")]
pub enum Slice {
    Route { route: String },
    Tier { route: String, tier: String },
    Label { route: String, key: String, value: String },
}

/// The indicators for every route, every (route, tier) that served a call and every (route,
/// label) of `calls`, in a stable order.
pub fn breakdown(calls: &[CallRecord]) -> Vec<(Slice, Slis)> {
    let mut slices: BTreeMap<Slice, Vec<&CallRecord>> = BTreeMap::new();
    for call in calls {
        slices.entry(Slice::Route { route: call.route.clone() }).or_default().push(call);
        if let Some(tier) = &call.tier {
            let slice = Slice::Tier { route: call.route.clone(), tier: tier.clone() };
            slices.entry(slice).or_default().push(call);
        }
        for (key, value) in &call.labels {
            let slice =
                Slice::Label { route: call.route.clone(), key: key.clone(), value: value.clone() };
            slices.entry(slice).or_default().push(call);
        }
    }
    slices.into_iter().map(|(slice, calls)| (slice, Slis::of(&calls))).collect()
}

/// A window as operators write it: a whole number and a unit, `s`, `m`, `h` or `d` (`90s`,
/// `15m`, `1h`, `7d`). The error says what is wrong.
pub fn parse_window(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("`{text}` is not a window like 90s, 15m, 1h or 7d")),
    };
    match number.parse::<u64>() {
        Ok(n) if n > 0 => Ok(std::time::Duration::from_secs(n.saturating_mul(seconds))),
        _ => Err(format!("`{text}` is not a window like 90s, 15m, 1h or 7d")),
    }
}

/// One bucket of a slice's indicators over time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    pub start_unix_ms: i64,
    pub slis: Slis,
}

/// The indicators of each route's calls in `buckets` equal buckets from `since_unix_ms` to
/// `until_unix_ms` (calls given with when they were made), for charts over time.
pub fn over_time(
    calls: &[(i64, CallRecord)],
    since_unix_ms: i64,
    until_unix_ms: i64,
    buckets: usize,
) -> BTreeMap<String, Vec<Bucket>> {
    let buckets = buckets.max(1);
    let width = ((until_unix_ms - since_unix_ms).max(1) as f64 / buckets as f64).ceil() as i64;
    let mut grouped: BTreeMap<String, Vec<Vec<&CallRecord>>> = BTreeMap::new();
    for (at, call) in calls {
        let index = (((at - since_unix_ms).max(0)) / width.max(1)) as usize;
        let slots = grouped.entry(call.route.clone()).or_insert_with(|| vec![Vec::new(); buckets]);
        slots[index.min(buckets - 1)].push(call);
    }
    grouped
        .into_iter()
        .map(|(route, slots)| {
            let series = slots
                .into_iter()
                .enumerate()
                .map(|(i, calls)| Bucket {
                    start_unix_ms: since_unix_ms + i as i64 * width,
                    slis: Slis::of(&calls),
                })
                .collect();
            (route, series)
        })
        .collect()
}

fn push_bool(out: &mut Vec<u8>, value: bool) {
    out.extend_from_slice(if value { b"true" } else { b"false" });
}

/// A float as serde_json writes it (a non-finite one as `null`), or `null`.
fn push_f64(out: &mut Vec<u8>, value: Option<f64>) {
    match value {
        Some(value) => {
            let _ = serde_json::to_writer(&mut *out, &value);
        }
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const OUTCOMES: [Outcome; 8] = [
        Outcome::Answered,
        Outcome::Fallback,
        Outcome::Degraded,
        Outcome::Stopped,
        Outcome::Interrupted,
        Outcome::Declined,
        Outcome::HandedOff,
        Outcome::Clarified,
    ];

    fn float() -> impl Strategy<Value = Option<f64>> {
        prop_oneof![
            Just(None),
            Just(Some(0.0)),
            Just(Some(1.0)),
            Just(Some(f64::NAN)),
            Just(Some(f64::INFINITY)),
            any::<f64>().prop_map(Some),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1_000))]

        #[test]
        fn a_record_is_written_as_serde_writes_it(
            route in any::<String>(),
            tier in proptest::option::of(any::<String>()),
            labels in proptest::collection::btree_map(any::<String>(), any::<String>(), 0..4),
            outcome in 0..OUTCOMES.len(),
            (failover, repaired) in (any::<bool>(), any::<bool>()),
            (attempts, elapsed_ms, deadline_ms) in (any::<u32>(), any::<u64>(), any::<u64>()),
            first_token_ms in proptest::option::of(any::<u64>()),
            escalation in proptest::option::of(0..Trigger::ALL.len()),
            covered in proptest::option::of(any::<bool>()),
            (quality, quality_probability) in (float(), float()),
        ) {
            let record = CallRecord {
                route,
                tier,
                labels,
                outcome: OUTCOMES[outcome],
                failover,
                attempts,
                repaired,
                elapsed_ms,
                first_token_ms,
                deadline_ms,
                escalation: escalation.map(|at| Trigger::ALL[at]),
                covered,
                quality,
                quality_probability,
            };
            prop_assert_eq!(record.to_json(), serde_json::to_string(&record).unwrap());
        }
    }

    fn call(outcome: Outcome) -> CallRecord {
        CallRecord {
            route: "support".into(),
            tier: matches!(outcome, Outcome::Answered | Outcome::Fallback)
                .then(|| if outcome == Outcome::Answered { "primary" } else { "fallback" }.into()),
            labels: BTreeMap::new(),
            outcome,
            failover: false,
            attempts: 1,
            repaired: false,
            elapsed_ms: 1_000,
            first_token_ms: None,
            deadline_ms: 20_000,
            escalation: None,
            covered: None,
            quality: None,
            quality_probability: None,
        }
    }

    fn all(calls: &[CallRecord]) -> Slis {
        Slis::of(&calls.iter().collect::<Vec<_>>())
    }

    #[test]
    fn availability_counts_answers_in_time_and_clean_hand_offs_and_nothing_else() {
        let mut late = call(Outcome::Answered);
        late.elapsed_ms = 20_001;
        let mut handed_off = call(Outcome::HandedOff);
        handed_off.escalation = Some(Trigger::HandoffRule);
        let mut stopped_and_handed = call(Outcome::Stopped);
        stopped_and_handed.escalation = Some(Trigger::StopCondition);
        let calls = [
            call(Outcome::Answered),
            call(Outcome::Fallback),
            call(Outcome::Clarified),
            handed_off,
            stopped_and_handed,
            late,                       // timed out for the customer
            call(Outcome::Degraded),    // no model: not available
            call(Outcome::Interrupted), // cut mid-answer
            call(Outcome::Stopped),     // stopped with no hand-off
            call(Outcome::Declined),
        ];
        let slis = all(&calls);
        assert_eq!(slis.calls, 10);
        assert_eq!(slis.availability, Some(0.5));
        assert_eq!(slis.degraded_share, Some(0.1));
        assert_eq!(slis.escalation_rate["handoff_rule"], 0.1);
        assert_eq!(slis.escalation_rate["stop_condition"], 0.1);
        assert!(!slis.escalation_rate.contains_key("coverage"));
    }

    #[test]
    fn a_fallback_inside_the_planned_share_is_not_a_fallback_beyond_plan() {
        let mut planned = call(Outcome::Fallback);
        planned.failover = true;
        let mut retried = call(Outcome::Answered);
        retried.attempts = 2;
        // Two attempts on the primary, then the fallback's.
        let mut fell_back = call(Outcome::Fallback);
        fell_back.attempts = 3;
        let calls = [planned, fell_back, retried, call(Outcome::Answered)];
        let slis = all(&calls);
        assert_eq!(slis.fallback_beyond_plan, Some(0.25));
        // The planned failover answered on its first attempt, on a fallback tier by plan: not a
        // first-try success of the primary, and no retry either.
        assert_eq!(slis.success_first_try, Some(0.25));
        assert_eq!(slis.success_after_retries, Some(0.5));
    }

    #[test]
    fn validity_coverage_quality_and_latency_by_their_definitions() {
        let mut repaired = call(Outcome::Answered);
        repaired.repaired = true;
        repaired.elapsed_ms = 4_000;
        repaired.first_token_ms = Some(900);
        let mut covered = call(Outcome::Answered);
        covered.covered = Some(true);
        covered.quality = Some(0.9);
        covered.elapsed_ms = 2_000;
        let mut declined = call(Outcome::HandedOff);
        declined.covered = Some(false);
        declined.escalation = Some(Trigger::Coverage);
        let mut judged = call(Outcome::Fallback);
        judged.quality = Some(0.5);
        judged.elapsed_ms = 3_000;
        let slis = all(&[repaired, covered, declined, judged]);
        assert_eq!(slis.valid_first_try, Some(2.0 / 3.0));
        assert_eq!(slis.coverage, Some(0.5));
        assert_eq!(slis.quality, Some(0.7));
        // Answered calls only: 2,000 / 3,000 / 4,000 ms to the end; 900 to the first token of
        // the stream, the end for the others.
        assert_eq!(slis.latency_end_ms, Some(Percentiles { p50: 3_000, p95: 4_000, p99: 4_000 }));
        assert_eq!(
            slis.latency_first_token_ms,
            Some(Percentiles { p50: 2_000, p95: 3_000, p99: 3_000 })
        );
        let empty = all(&[]);
        assert_eq!((empty.availability, empty.valid_first_try, empty.quality), (None, None, None));
    }

    #[test]
    fn a_record_reads_its_report() {
        use crate::report::{CallReport, ServedBy};
        let report = CallReport {
            route: "support".into(),
            settings_version: None,
            outcome: Outcome::Fallback,
            served_by: Some(ServedBy {
                tier: 1,
                tier_name: "fallback".into(),
                provider: "anthropic".into(),
                model: "claude".into(),
                failover: true,
            }),
            steps: Vec::new(),
            alerts: Vec::new(),
            elapsed_ms: 1_234,
            rejected_draft: None,
            labels: BTreeMap::new(),
        };
        let record = CallRecord::of_report(&report, BTreeMap::new(), 20_000);
        assert_eq!(record.tier.as_deref(), Some("fallback"));
        assert!(record.failover && !record.repaired);
        assert_eq!((record.attempts, record.elapsed_ms), (0, 1_234));
        let slis = Slis::of(&[&record]);
        assert_eq!(slis.fallback_beyond_plan, Some(0.0), "planned failover");
        assert_eq!(slis.availability, Some(1.0));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(Percentiles::of(samples), Some(Percentiles { p50: 50, p95: 95, p99: 99 }));
        assert_eq!(Percentiles::of(vec![7]), Some(Percentiles { p50: 7, p95: 7, p99: 7 }));
        assert_eq!(Percentiles::of(vec![]), None);
    }

    #[test]
    fn a_slice_that_drops_while_the_routes_average_holds_shows_in_the_label_breakdown() {
        // 90 delivery questions answered with quality 0.9; 10 ICU questions at 0.3: the route's
        // mean is 0.84, the ICU slice's is 0.3.
        let mut calls = Vec::new();
        for n in 0..100 {
            let mut record = call(Outcome::Answered);
            let kind = if n < 90 { "delivery" } else { "icu" };
            record.labels.insert("question_type".into(), kind.into());
            record.quality = Some(if n < 90 { 0.9 } else { 0.3 });
            calls.push(record);
        }
        let rows = breakdown(&calls);
        let find =
            |slice: Slice| rows.iter().find(|(s, _)| *s == slice).map(|(_, slis)| slis.clone());
        let route = find(Slice::Route { route: "support".into() }).unwrap();
        assert!((route.quality.unwrap() - 0.84).abs() < 1e-9);
        let label = |value: &str| Slice::Label {
            route: "support".into(),
            key: "question_type".into(),
            value: value.into(),
        };
        assert!((find(label("icu")).unwrap().quality.unwrap() - 0.3).abs() < 1e-9);
        assert!((find(label("delivery")).unwrap().quality.unwrap() - 0.9).abs() < 1e-9);
        assert_eq!(find(label("icu")).unwrap().calls, 10);
        let tier = find(Slice::Tier { route: "support".into(), tier: "primary".into() }).unwrap();
        assert_eq!(tier.calls, 100);
    }

    #[test]
    fn windows_are_a_number_and_a_unit() {
        assert_eq!(parse_window("90s").unwrap().as_secs(), 90);
        assert_eq!(parse_window("15m").unwrap().as_secs(), 900);
        assert_eq!(parse_window("1h").unwrap().as_secs(), 3_600);
        assert_eq!(parse_window("7d").unwrap().as_secs(), 7 * 86_400);
        for bad in ["", "h", "0h", "1w", "1.5h", "-1h", "1 h"] {
            assert!(parse_window(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn over_time_puts_each_call_in_its_bucket() {
        let calls = vec![
            (0, call(Outcome::Answered)),
            (10, call(Outcome::Degraded)),
            (99, call(Outcome::Degraded)),
        ];
        let series = over_time(&calls, 0, 100, 4);
        let support = &series["support"];
        assert_eq!(support.len(), 4);
        assert_eq!(support.iter().map(|b| b.slis.calls).collect::<Vec<_>>(), [2, 0, 0, 1]);
        assert_eq!(support[0].slis.availability, Some(0.5));
        assert_eq!(support[1].slis.availability, None, "an empty bucket has no share");
        assert_eq!(support[3].start_unix_ms, 75);
    }
}
