//! How far a judge can be trusted: its verdicts beside a person's on the same answers. The
//! number depends on how it is computed (the spec's MT-Bench example: GPT-4 agreed with experts
//! on 85 % of comparisons with ties left out, 66 % with them counted), so both are reported:
//!
//! - **agreement with ties**: the share of all labelled answers where judge and person gave the
//!   same label (`pass`, `fail` or `tie`);
//! - **agreement without ties**: the same over the answers where neither said `tie`;
//! - **Cohen's kappa** over all labels: agreement beyond what the two labels' shares alone would
//!   give, (p_o − p_e) / (1 − p_e);
//! - **TPR** (the judge passes what the person passed) and **TNR** (it fails what the person
//!   failed), on the answers without a tie, each with a Wilson 95 % interval;
//! - the **disagreements**, to read;
//! - per **week** (when labels carry one), so the judge and the people drifting apart shows as a
//!   drop from one week to the next.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A verdict, the person's or the judge's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Label {
    Pass,
    Fail,
    /// Neither clearly (a person's "can't tell", a pairwise tie).
    Tie,
}

/// One answer labelled by a person and by the judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Labelled {
    pub id: String,
    pub human: Label,
    pub judge: Label,
    /// The week the person labelled it (`2026-W48`), for the week-over-week drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub week: Option<String>,
    /// What the person reads to label it (the question, evidence, answer and the judge's
    /// reply, as `rein judge verdicts --labels-out` writes them); the numbers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<serde_json::Value>,
}

/// The ISO 8601 week (`2026-W49`) of a time in Unix milliseconds (UTC): weeks start on
/// Monday, and week 1 is the one holding the year's first Thursday.
pub fn iso_week(unix_ms: i64) -> String {
    let day = unix_ms.div_euclid(86_400_000);
    // 1970-01-01 was a Thursday: Monday = 1 … Sunday = 7.
    let weekday = (day + 3).rem_euclid(7) + 1;
    let thursday = day - weekday + 4;
    let year = civil_year(thursday);
    let week = (thursday - days_from_civil(year, 1, 1)) / 7 + 1;
    format!("{year}-W{week:02}")
}

/// The year of a day counted from 1970-01-01 (the proleptic Gregorian calendar).
fn civil_year(day: i64) -> i64 {
    let z = day + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(month <= 2)
}

/// The day counted from 1970-01-01 of a date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A share with its Wilson score interval (95 %).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Rate {
    pub hits: u32,
    pub of: u32,
    pub rate: f64,
    pub low: f64,
    pub high: f64,
}

/// z for a two-sided 95 % interval.
const Z95: f64 = 1.959_963_984_540_054;

impl Rate {
    /// `hits` of `of`, with its Wilson interval; `of = 0` has rate 0 in [0, 1].
    pub fn of(hits: u32, of: u32) -> Rate {
        if of == 0 {
            return Rate { hits, of, rate: 0.0, low: 0.0, high: 1.0 };
        }
        let n = f64::from(of);
        let p = f64::from(hits) / n;
        let z2 = Z95 * Z95;
        let denominator = 1.0 + z2 / n;
        let centre = (p + z2 / (2.0 * n)) / denominator;
        let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
        Rate { hits, of, rate: p, low: (centre - half).max(0.0), high: (centre + half).min(1.0) }
    }
}

/// A disagreement, to read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Disagreement {
    pub id: String,
    pub human: Label,
    pub judge: Label,
}

/// One week's agreement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Week {
    pub week: String,
    pub labelled: u32,
    pub with_ties: f64,
    pub without_ties: f64,
}

/// The judge against the people.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    pub labelled: u32,
    pub with_ties: Rate,
    pub without_ties: Rate,
    pub kappa: f64,
    pub tpr: Rate,
    pub tnr: Rate,
    /// `confusion[human][judge]`: how many answers got that pair of labels.
    pub confusion: BTreeMap<Label, BTreeMap<Label, u32>>,
    pub disagreements: Vec<Disagreement>,
    /// Oldest first.
    pub weeks: Vec<Week>,
}

impl Agreement {
    pub fn of(labels: &[Labelled]) -> Agreement {
        let count = |f: &dyn Fn(&Labelled) -> bool| {
            u32::try_from(labels.iter().filter(|l| f(l)).count()).unwrap_or(u32::MAX)
        };
        let total = u32::try_from(labels.len()).unwrap_or(u32::MAX);
        let untied = |l: &Labelled| l.human != Label::Tie && l.judge != Label::Tie;
        let same = count(&|l| l.human == l.judge);
        let untied_total = count(&untied);
        let untied_same = count(&|l| untied(l) && l.human == l.judge);
        let mut confusion: BTreeMap<Label, BTreeMap<Label, u32>> = BTreeMap::new();
        for label in labels {
            *confusion.entry(label.human).or_default().entry(label.judge).or_default() += 1;
        }
        let kappa = {
            let n = f64::from(total.max(1));
            let observed = f64::from(same) / n;
            let expected: f64 = [Label::Pass, Label::Fail, Label::Tie]
                .iter()
                .map(|label| {
                    let human = f64::from(count(&|l| l.human == *label)) / n;
                    let judge = f64::from(count(&|l| l.judge == *label)) / n;
                    human * judge
                })
                .sum();
            if (1.0 - expected).abs() < f64::EPSILON {
                // Both gave one and the same label to everything: nothing beyond chance to say.
                if observed >= 1.0 { 1.0 } else { 0.0 }
            } else {
                (observed - expected) / (1.0 - expected)
            }
        };
        let tpr = Rate::of(
            count(&|l| l.human == Label::Pass && l.judge == Label::Pass),
            count(&|l| l.human == Label::Pass && l.judge != Label::Tie),
        );
        let tnr = Rate::of(
            count(&|l| l.human == Label::Fail && l.judge == Label::Fail),
            count(&|l| l.human == Label::Fail && l.judge != Label::Tie),
        );
        let disagreements = labels
            .iter()
            .filter(|l| l.human != l.judge)
            .map(|l| Disagreement { id: l.id.clone(), human: l.human, judge: l.judge })
            .collect();
        let mut by_week: BTreeMap<&str, Vec<&Labelled>> = BTreeMap::new();
        for label in labels {
            if let Some(week) = &label.week {
                by_week.entry(week.as_str()).or_default().push(label);
            }
        }
        let weeks = by_week
            .into_iter()
            .map(|(week, labels)| {
                let share =
                    |hits: usize, of: usize| if of == 0 { 0.0 } else { hits as f64 / of as f64 };
                let same = labels.iter().filter(|l| l.human == l.judge).count();
                let untied_labels: Vec<&&Labelled> = labels.iter().filter(|l| untied(l)).collect();
                let untied_same = untied_labels.iter().filter(|l| l.human == l.judge).count();
                Week {
                    week: week.to_string(),
                    labelled: u32::try_from(labels.len()).unwrap_or(u32::MAX),
                    with_ties: share(same, labels.len()),
                    without_ties: share(untied_same, untied_labels.len()),
                }
            })
            .collect();
        Agreement {
            labelled: total,
            with_ties: Rate::of(same, total),
            without_ties: Rate::of(untied_same, untied_total),
            kappa,
            tpr,
            tnr,
            confusion,
            disagreements,
            weeks,
        }
    }

    /// How far agreement (with ties) fell from the week before the latest to the latest; `None`
    /// with fewer than two weeks.
    pub fn weekly_drop(&self) -> Option<f64> {
        let [.., before, latest] = self.weeks.as_slice() else { return None };
        Some(before.with_ties - latest.with_ties)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn iso_weeks_by_hand() {
        let day = |y, m, d| days_from_civil(y, m, d) * 86_400_000;
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(iso_week(day(2026, 12, 2)), "2026-W49", "a Wednesday");
        assert_eq!(iso_week(day(2026, 1, 1)), "2026-W01", "a Thursday starts week 1");
        assert_eq!(iso_week(day(2027, 1, 1)), "2026-W53", "a Friday belongs to the year before");
        assert_eq!(iso_week(day(2024, 12, 30)), "2025-W01", "a Monday of next year's week 1");
        assert_eq!(iso_week(day(2021, 1, 3)), "2020-W53", "a Sunday");
        assert_eq!(iso_week(day(2026, 12, 6) + 86_399_999), "2026-W49", "Sunday's last ms");
        assert_eq!(iso_week(day(2026, 12, 7)), "2026-W50", "Monday starts the next");
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn labels(pairs: &[(Label, Label, usize)], week: Option<&str>) -> Vec<Labelled> {
        let mut out = Vec::new();
        for (human, judge, times) in pairs {
            for _ in 0..*times {
                out.push(Labelled {
                    id: format!("a{}", out.len()),
                    human: *human,
                    judge: *judge,
                    week: week.map(str::to_string),
                    context: None,
                });
            }
        }
        out
    }

    #[test]
    fn a_hand_computed_confusion_matrix_with_ties_in_and_out() {
        use Label::{Fail, Pass, Tie};
        // human\\judge: pass/pass 4, pass/fail 1, fail/pass 1, fail/fail 2, tie/pass 1, pass/tie 1.
        let all = labels(
            &[
                (Pass, Pass, 4),
                (Pass, Fail, 1),
                (Fail, Pass, 1),
                (Fail, Fail, 2),
                (Tie, Pass, 1),
                (Pass, Tie, 1),
            ],
            None,
        );
        let agreement = Agreement::of(&all);
        assert_eq!(agreement.labelled, 10);
        assert!(close(agreement.with_ties.rate, 6.0 / 10.0), "ties counted: 6 of 10");
        assert!(close(agreement.without_ties.rate, 6.0 / 8.0), "ties left out: 6 of 8");
        // Marginals: human (0.6, 0.3, 0.1), judge (0.6, 0.3, 0.1): p_e = 0.46, p_o = 0.6.
        assert!(close(agreement.kappa, (0.6 - 0.46) / (1.0 - 0.46)), "{}", agreement.kappa);
        assert_eq!((agreement.tpr.hits, agreement.tpr.of), (4, 5));
        assert_eq!((agreement.tnr.hits, agreement.tnr.of), (2, 3));
        // Wilson 95 % intervals of 4/5 and 2/3.
        assert!((agreement.tpr.low - 0.375_534_6).abs() < 1e-6, "{:?}", agreement.tpr);
        assert!((agreement.tpr.high - 0.963_775_9).abs() < 1e-6, "{:?}", agreement.tpr);
        assert!((agreement.tnr.low - 0.207_659_6).abs() < 1e-6, "{:?}", agreement.tnr);
        assert!((agreement.tnr.high - 0.938_508_1).abs() < 1e-6, "{:?}", agreement.tnr);
        assert_eq!(agreement.confusion[&Pass][&Fail], 1);
        assert_eq!(agreement.disagreements.len(), 4);
    }

    #[test]
    fn a_judge_drifting_from_the_people_shows_week_over_week() {
        use Label::{Fail, Pass};
        let mut all =
            labels(&[(Pass, Pass, 9), (Fail, Fail, 9), (Fail, Pass, 2)], Some("2026-W47"));
        all.extend(labels(&[(Pass, Pass, 8), (Fail, Fail, 6), (Fail, Pass, 6)], Some("2026-W48")));
        let agreement = Agreement::of(&all);
        let weeks: Vec<(&str, f64)> =
            agreement.weeks.iter().map(|w| (w.week.as_str(), w.with_ties)).collect();
        assert_eq!(weeks, [("2026-W47", 0.9), ("2026-W48", 0.7)]);
        assert!(close(agreement.weekly_drop().unwrap(), 0.2));
        assert!(Agreement::of(&all[..20]).weekly_drop().is_none(), "one week: no drift yet");
    }

    #[test]
    fn kappa_is_zero_for_a_judge_that_passes_everything() {
        use Label::{Fail, Pass};
        let all = labels(&[(Pass, Pass, 7), (Fail, Pass, 3)], None);
        let agreement = Agreement::of(&all);
        assert!(close(agreement.with_ties.rate, 0.7), "70 % agreement...");
        assert!(close(agreement.kappa, 0.0), "...is no better than chance");
        assert!(close(agreement.tnr.rate, 0.0));
    }
}
