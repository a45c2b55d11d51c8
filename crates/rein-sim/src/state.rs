//! The simulator's shared state: the timeline clock (on tokio's clock, so paused-time tests
//! can move it), script positions, scenario mix draws, reply-rule counters, the attempt log
//! and the id counter. `POST /_sim/reset` puts all of it back to the start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rein_core::WireFormat;
use tokio::time::Instant;

use crate::answer::{Scripted, splitmix64};
use crate::fault::FaultSpec;
use crate::log::AttemptLog;
use crate::scenario::Scenario;

#[derive(Debug)]
pub(crate) struct Shared {
    pub scenario: Option<Scenario>,
    pub log: AttemptLog,
    /// Vertex AI's issued access tokens.
    pub tokens: crate::vertex::Tokens,
    clock: Mutex<Timeline>,
    ids: AtomicU64,
    /// Mixed into ids so that two simulator runs hand out different ones.
    id_salt: u64,
}

#[derive(Debug)]
struct Timeline {
    start: Instant,
    unix_ms_at_start: u64,
    /// Requests seen so far per (sequence key, script).
    scripts: HashMap<(String, String), usize>,
    /// Per (sequence key, script): the key whose position the request walks. Its own key,
    /// unless the request extends an earlier one's conversation (a re-ask), which it continues.
    chains: HashMap<(String, String), String>,
    /// Requests drawn so far per scenario phase.
    mix_draws: Vec<u64>,
    /// Requests answered so far per scenario reply rule.
    replies: Vec<u64>,
}

/// The scenario's say about one request.
#[derive(Debug, Default)]
pub(crate) struct ScenarioPick {
    /// The phase in force, if any.
    pub phase: Option<String>,
    /// Its spec for this request, when the phase applies to it.
    pub spec: Option<FaultSpec>,
}

impl Shared {
    pub(crate) fn new(scenario: Option<Scenario>, log: AttemptLog) -> Shared {
        // The one read of the system clock: later times advance with tokio's clock, so logs
        // under paused time stay consistent with the timeline.
        let unix_ms = rein_core::clock::unix_ms();
        let phases = scenario.as_ref().map_or(0, |s| s.phases().len());
        let replies = scenario.as_ref().map_or(0, |s| s.replies().len());
        Shared {
            scenario,
            log,
            tokens: crate::vertex::Tokens::default(),
            clock: Mutex::new(Timeline {
                start: Instant::now(),
                unix_ms_at_start: unix_ms,
                scripts: HashMap::new(),
                chains: HashMap::new(),
                mix_draws: vec![0; phases],
                replies: vec![0; replies],
            }),
            ids: AtomicU64::new(0),
            id_salt: splitmix64(unix_ms),
        }
    }

    fn timeline(&self) -> MutexGuard<'_, Timeline> {
        self.clock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Time since the timeline started, and the wall-clock time now in Unix milliseconds.
    pub(crate) fn now(&self) -> (Duration, u64) {
        let timeline = self.timeline();
        let elapsed = timeline.start.elapsed();
        let unix_ms = timeline.unix_ms_at_start.saturating_add(elapsed.as_millis() as u64);
        (elapsed, unix_ms)
    }

    /// Restarts the timeline and forgets script positions, mix draws, reply-rule counts and the
    /// in-memory log.
    pub(crate) fn reset(&self) {
        let mut timeline = self.timeline();
        let elapsed = timeline.start.elapsed();
        timeline.unix_ms_at_start =
            timeline.unix_ms_at_start.saturating_add(elapsed.as_millis() as u64);
        timeline.start = Instant::now();
        timeline.scripts.clear();
        timeline.chains.clear();
        timeline.mix_draws.iter_mut().for_each(|n| *n = 0);
        timeline.replies.iter_mut().for_each(|n| *n = 0);
        drop(timeline);
        self.log.clear();
    }

    /// A number never handed out before by this simulator.
    pub(crate) fn next_id(&self) -> u64 {
        splitmix64(self.ids.fetch_add(1, Ordering::Relaxed) ^ self.id_salt)
    }

    /// The 0-based position of this request in the script `spec` for `sequence_key`. A request
    /// that `extends` the conversation of an earlier request of the same script (a re-ask)
    /// takes the next position of that request's sequence instead of starting its own.
    pub(crate) fn next_script_index(
        &self,
        sequence_key: &str,
        extends: Option<&str>,
        spec: &str,
    ) -> usize {
        let mut timeline = self.timeline();
        let own = (sequence_key.to_owned(), spec.to_owned());
        let chain = match timeline.chains.get(&own) {
            Some(chain) => chain.clone(),
            None => {
                let continued = extends.and_then(|earlier| {
                    timeline.chains.get(&(earlier.to_owned(), spec.to_owned())).cloned()
                });
                let chain = continued.unwrap_or_else(|| sequence_key.to_owned());
                timeline.chains.insert(own, chain.clone());
                chain
            }
        };
        let seen = timeline.scripts.entry((chain, spec.to_owned())).or_insert(0);
        let index = *seen;
        *seen += 1;
        index
    }

    /// What the scenario says about a request of this format and model right now. Without
    /// `draw`, only the phase is named and the mix is left untouched.
    pub(crate) fn scenario_pick(
        &self,
        format: Option<WireFormat>,
        model: &str,
        draw: bool,
    ) -> ScenarioPick {
        let Some(scenario) = &self.scenario else { return ScenarioPick::default() };
        let mut timeline = self.timeline();
        let elapsed = timeline.start.elapsed();
        let Some((index, phase)) = scenario.phase_at(elapsed) else {
            return ScenarioPick::default();
        };
        let mut pick = ScenarioPick { phase: Some(phase.name.clone()), spec: None };
        if draw && phase.applies_to(format, model) {
            let draw = timeline.mix_draws.get(index).copied().unwrap_or(0);
            if let Some(slot) = timeline.mix_draws.get_mut(index) {
                *slot += 1;
            }
            pick.spec = phase.pick(index, draw).cloned();
        }
        pick
    }

    /// The scenario's scripted answer to a text request for `model` whose last user message
    /// says `last_user_text`, with the index of the rule that gives it: the first rule that
    /// matches, at its next text (this counts as one answer by that rule).
    pub(crate) fn scripted_reply(
        &self,
        model: &str,
        last_user_text: &str,
    ) -> Option<(usize, Scripted)> {
        let scenario = self.scenario.as_ref()?;
        let (index, rule) = scenario.reply_for(model, last_user_text)?;
        let mut timeline = self.timeline();
        let n = timeline.replies.get(index).copied().unwrap_or(0);
        if let Some(slot) = timeline.replies.get_mut(index) {
            *slot += 1;
        }
        Some((index, Scripted { text: rule.text(n).to_owned(), logprob: rule.logprob }))
    }
}
