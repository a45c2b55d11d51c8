//! The coverage threshold sweep: the arithmetic that chooses a route's coverage cutoff on an eval
//! dataset. Each case has the coverage check's score, whether anything in the evidence answers it
//! (the dataset adds questions no passage answers), and whether the route's answer was right.
//! For each cutoff, the cases scoring at least the cutoff are **answered** and the rest declined
//! (a hand-off or a clarifying question, as the gateway does): **coverage** is the answered
//! share of all cases, and **accuracy** is measured on the answered share only (an unanswerable
//! question answered is wrong; a declined one is neither right nor wrong). Raising the cutoff
//! trades coverage for accuracy, so the two are always reported together, with the share of
//! the unanswerable questions declined beside them (the spec's made-up table: 0.5 answers 78 %
//! of 250 questions, 97 % of them right; 0.8 answers 70 %, 99.4 % right).
//!
//! The chosen cutoff is the lowest one whose accuracy on the answered share reaches a stated
//! minimum: coverage only falls as the cutoff rises, so that is the most coverage at that
//! accuracy. A cutoff that answers nothing has no accuracy and is never chosen.

use serde::{Deserialize, Serialize};

/// One case of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepCase {
    pub id: String,
    /// The coverage check's score, in [0, 1].
    pub score: f64,
    /// Something in the case's evidence answers it.
    pub answerable: bool,
    /// The route's answer passed the case's checkers (meaningless for an unanswerable case,
    /// which is wrong whenever it is answered).
    pub correct: bool,
}

/// The sweep at one cutoff.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    pub cutoff: f64,
    /// All cases.
    pub cases: u32,
    /// Cases scoring at least the cutoff.
    pub answered: u32,
    /// Answered cases that are answerable and whose answer was right.
    pub correct: u32,
    /// `answered / cases`.
    pub coverage: f64,
    /// `correct / answered`; `None` when nothing is answered.
    pub accuracy: Option<f64>,
    /// Answerable cases declined: the price of the cutoff.
    pub answerable_declined: u32,
    pub unanswerable: u32,
    pub unanswerable_declined: u32,
    /// `unanswerable_declined / unanswerable`; `None` without unanswerable cases.
    pub unanswerable_declined_share: Option<f64>,
}

/// Why a sweep cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepError {
    #[error("no cases to sweep")]
    NoCases,
    #[error("no cutoffs to try")]
    NoCutoffs,
    #[error("cutoff {0} is not between 0 and 1")]
    Cutoff(f64),
    #[error("case `{id}` has score {score}, not between 0 and 1")]
    Score { id: String, score: f64 },
}

fn share(part: u32, whole: u32) -> Option<f64> {
    (whole > 0).then(|| f64::from(part) / f64::from(whole))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The table of `cases` at each of `cutoffs`, in ascending order of cutoff (duplicates once).
pub fn sweep(cases: &[SweepCase], cutoffs: &[f64]) -> Result<Vec<SweepRow>, SweepError> {
    if cases.is_empty() {
        return Err(SweepError::NoCases);
    }
    if cutoffs.is_empty() {
        return Err(SweepError::NoCutoffs);
    }
    if let Some(&bad) = cutoffs.iter().find(|c| !(0.0..=1.0).contains(*c)) {
        return Err(SweepError::Cutoff(bad));
    }
    if let Some(bad) = cases.iter().find(|c| !(0.0..=1.0).contains(&c.score)) {
        return Err(SweepError::Score { id: bad.id.clone(), score: bad.score });
    }
    let mut cutoffs = cutoffs.to_vec();
    cutoffs.sort_by(f64::total_cmp);
    cutoffs.dedup();
    let total = count(cases.len());
    let unanswerable = count(cases.iter().filter(|c| !c.answerable).count());
    Ok(cutoffs
        .into_iter()
        .map(|cutoff| {
            let answered: Vec<&SweepCase> = cases.iter().filter(|c| c.score >= cutoff).collect();
            let correct = count(answered.iter().filter(|c| c.answerable && c.correct).count());
            let answered_unanswerable = count(answered.iter().filter(|c| !c.answerable).count());
            let answered = count(answered.len());
            let unanswerable_declined = unanswerable - answered_unanswerable;
            SweepRow {
                cutoff,
                cases: total,
                answered,
                correct,
                coverage: f64::from(answered) / f64::from(total),
                accuracy: share(correct, answered),
                answerable_declined: (total - unanswerable) - (answered - answered_unanswerable),
                unanswerable,
                unanswerable_declined,
                unanswerable_declined_share: share(unanswerable_declined, unanswerable),
            }
        })
        .collect())
}

/// The row of the lowest cutoff whose accuracy on the answered share is at least
/// `min_accuracy` (the most coverage at that accuracy); `None` when no row reaches it.
pub fn choose(rows: &[SweepRow], min_accuracy: f64) -> Option<&SweepRow> {
    rows.iter()
        .filter(|row| row.accuracy.is_some_and(|accuracy| accuracy >= min_accuracy))
        .min_by(|a, b| a.cutoff.total_cmp(&b.cutoff))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    /// `n` cases alike.
    fn cases(into: &mut Vec<SweepCase>, n: usize, score: f64, answerable: bool, correct: bool) {
        for _ in 0..n {
            let id = format!("c{}", into.len());
            into.push(SweepCase { id, score, answerable, correct });
        }
    }

    /// The spec's flower company: 200 answerable questions and 50 no article answers, with
    /// scores chosen so that 0.5 answers 195 (78 %) with 189 right (96.9 %) and 0.8 answers 175
    /// (70 %) with 174 right (99.43 %).
    fn flower_company() -> Vec<SweepCase> {
        let mut all = Vec::new();
        cases(&mut all, 174, 0.9, true, true); // covered and answered right
        cases(&mut all, 1, 0.85, false, false); // no article answers it, yet it scores high
        cases(&mut all, 15, 0.6, true, true); // right, but the check is less sure
        cases(&mut all, 2, 0.6, true, false); // answered wrong
        cases(&mut all, 3, 0.55, false, false); // unanswerable, over 0.5
        cases(&mut all, 5, 0.3, true, true);
        cases(&mut all, 4, 0.3, true, false);
        cases(&mut all, 46, 0.1, false, false); // unanswerable, scored low
        assert_eq!(all.len(), 250);
        assert_eq!(all.iter().filter(|c| c.answerable).count(), 200);
        all
    }

    #[test]
    fn the_spec_s_table_computed_by_hand() {
        let rows = sweep(&flower_company(), &[0.8, 0.0, 0.5, 0.95, 0.2, 0.5]).unwrap();
        let cutoffs: Vec<f64> = rows.iter().map(|r| r.cutoff).collect();
        assert_eq!(cutoffs, [0.0, 0.2, 0.5, 0.8, 0.95], "ascending, each once");
        // (cutoff, answered, correct, answerable declined, unanswerable declined), by hand:
        // 0.0 answers everything: right = 174 + 15 + 5 = 194.
        // 0.2 declines the 46 at 0.1: 204 answered, 194 right.
        // 0.5 also declines the 9 at 0.3: 195 answered; right 174 + 15 = 189.
        // 0.8 also declines the 20 at 0.6 and 0.55: 175 answered; 174 right.
        // 0.95 declines everything.
        let expected = [
            (0.0, 250, 194, 0, 0),
            (0.2, 204, 194, 0, 46),
            (0.5, 195, 189, 9, 46),
            (0.8, 175, 174, 26, 49),
            (0.95, 0, 0, 200, 50),
        ];
        for (row, (cutoff, answered, correct, answerable_declined, unanswerable_declined)) in
            rows.iter().zip(expected)
        {
            assert_eq!(row.cutoff, cutoff);
            assert_eq!(row.cases, 250);
            assert_eq!(row.answered, answered, "{row:?}");
            assert_eq!(row.correct, correct, "{row:?}");
            assert_eq!(row.answerable_declined, answerable_declined, "{row:?}");
            assert_eq!(row.unanswerable, 50);
            assert_eq!(row.unanswerable_declined, unanswerable_declined, "{row:?}");
        }
        // The spec's numbers: 0.5 → 78 % / 97 %, 0.8 → 70 % / 99.4 %.
        let at = |cutoff: f64| rows.iter().find(|r| r.cutoff == cutoff).unwrap();
        assert!(close(at(0.5).coverage, 0.78));
        assert!(close(at(0.5).accuracy.unwrap(), 189.0 / 195.0));
        assert_eq!(format!("{:.1}", at(0.5).accuracy.unwrap() * 100.0), "96.9");
        assert!(close(at(0.8).coverage, 0.70));
        assert!(close(at(0.8).accuracy.unwrap(), 174.0 / 175.0));
        assert_eq!(format!("{:.1}", at(0.8).accuracy.unwrap() * 100.0), "99.4");
        assert!(close(at(0.8).unanswerable_declined_share.unwrap(), 0.98));
        assert!(close(at(0.5).unanswerable_declined_share.unwrap(), 0.92));
        assert!(close(at(0.0).accuracy.unwrap(), 194.0 / 250.0));
        assert!(close(at(0.2).accuracy.unwrap(), 194.0 / 204.0));
        assert_eq!(at(0.95).accuracy, None, "nothing answered: no accuracy");
        assert!(close(at(0.95).coverage, 0.0));
    }

    #[test]
    fn the_chosen_cutoff_is_the_most_coverage_at_the_accuracy_asked_for() {
        let rows = sweep(&flower_company(), &[0.0, 0.2, 0.5, 0.8, 0.95]).unwrap();
        assert_eq!(choose(&rows, 0.99).map(|r| r.cutoff), Some(0.8), "the spec takes 0.8");
        assert_eq!(choose(&rows, 0.96).map(|r| r.cutoff), Some(0.5), "189/195 = 96.9 %");
        assert_eq!(choose(&rows, 0.95).map(|r| r.cutoff), Some(0.2), "194/204 = 95.1 %");
        assert_eq!(choose(&rows, 0.5).map(|r| r.cutoff), Some(0.0));
        assert_eq!(choose(&rows, 0.995), None, "none reaches 99.5 %; answering none is no choice");
        // Accuracy need not rise with the cutoff: the lowest cutoff that reaches it wins.
        let mut bumpy = Vec::new();
        cases(&mut bumpy, 1, 0.3, true, false);
        cases(&mut bumpy, 4, 0.4, true, true);
        cases(&mut bumpy, 1, 0.6, false, false);
        cases(&mut bumpy, 2, 0.7, true, true);
        let rows = sweep(&bumpy, &[0.35, 0.5, 0.65]).unwrap();
        let accuracy: Vec<Option<f64>> = rows.iter().map(|r| r.accuracy).collect();
        assert_eq!(accuracy, [Some(6.0 / 7.0), Some(2.0 / 3.0), Some(1.0)]);
        assert_eq!(choose(&rows, 0.8).map(|r| r.cutoff), Some(0.35));
        assert_eq!(choose(&rows, 0.9).map(|r| r.cutoff), Some(0.65));
    }

    #[test]
    fn a_score_on_the_cutoff_is_answered_and_bad_input_is_refused() {
        let one = [SweepCase { id: "a".into(), score: 0.8, answerable: true, correct: true }];
        let rows = sweep(&one, &[0.8]).unwrap();
        assert_eq!(rows[0].answered, 1, "score >= cutoff answers, as the gateway's verdict");
        assert_eq!(rows[0].unanswerable_declined_share, None, "no unanswerable cases");
        assert_eq!(sweep(&[], &[0.5]), Err(SweepError::NoCases));
        assert_eq!(sweep(&one, &[]), Err(SweepError::NoCutoffs));
        assert_eq!(sweep(&one, &[0.5, 1.5]), Err(SweepError::Cutoff(1.5)));
        assert!(matches!(sweep(&one, &[f64::NAN]), Err(SweepError::Cutoff(_))));
        let bad = [SweepCase { id: "b".into(), score: -0.1, answerable: true, correct: true }];
        let error = sweep(&bad, &[0.5]).unwrap_err();
        assert_eq!(error.to_string(), "case `b` has score -0.1, not between 0 and 1");
    }
}
