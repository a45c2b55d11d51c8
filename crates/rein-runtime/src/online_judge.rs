//! The online judge: sampled live answers judged after they have gone out, off the request
//! path. A finished call the route's `[judge]` sampling drew ([`rein_core::quality::Sampling`])
//! is handed over as a [`Sampled`] answer through a bounded queue with `try_send` (full: dropped
//! and counted, never waited for); a worker judges up to `concurrency` at once, each by one call
//! to the judge route on its own deadline (`timeout_ms`) with the route's rubric, reads PASS or
//! FAIL, and stores the [`Verdict`] with the probability its answer was sampled with. The
//! quality score SLI is the verdicts' mean weighted by 1/p (`rein_core::sli`); the gateway's
//! metrics see each verdict through a [`VerdictObserver`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use rein_core::quality::{Draw, read_verdict, rubric_prompt};
use rein_core::{CallContext, ChatRequest, Message};
use rein_store::calls::Verdict;
use tokio::sync::{Semaphore, mpsc, watch};

use crate::config::judge::JudgeConfig;
use crate::runtime::Runtime;

/// The most characters of the judge's reply kept with a verdict.
const REPLY_CHARS: usize = 500;

/// An answer drawn for the judge, as the request path hands it over.
#[derive(Debug, Clone)]
pub struct Sampled {
    /// When the judged call was made.
    pub at_unix_ms: i64,
    pub request_id: String,
    pub trace_id: String,
    pub route: String,
    pub tier: Option<String>,
    pub model: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub draw: Draw,
    /// The customer's last message.
    pub question: Option<String>,
    /// The evidence the answer had (`id`, text).
    pub evidence: Vec<(String, String)>,
    pub answer: String,
}

/// Why an answer drawn for the judge got no verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoVerdict {
    /// The queue was full.
    QueueFull,
    /// The judge route did not answer (an error, or only its degraded reply).
    JudgeFailed,
    /// The judge answered neither PASS nor FAIL.
    Unreadable,
    /// The verdict could not be stored.
    StoreFailed,
}

impl NoVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            NoVerdict::QueueFull => "queue_full",
            NoVerdict::JudgeFailed => "judge_failed",
            NoVerdict::Unreadable => "unreadable",
            NoVerdict::StoreFailed => "store_failed",
        }
    }
}

/// What sees each verdict (the gateway's metrics).
pub trait VerdictObserver: Send + Sync {
    fn judged(&self, verdict: &Verdict);
    fn no_verdict(&self, route: &str, why: NoVerdict);
}

/// Counts of what the judge did, for tests and logs.
#[derive(Debug, Default)]
pub struct JudgeStats {
    /// Taken into the queue.
    pub queued: AtomicU64,
    /// Of those, ended: with a verdict stored, or with none.
    pub ended: AtomicU64,
    pub judged: AtomicU64,
    /// Dropped for a full queue.
    pub dropped: AtomicU64,
}

impl JudgeStats {
    /// Answers queued or being judged now.
    pub fn pending(&self) -> u64 {
        self.queued.load(Ordering::Relaxed).saturating_sub(self.ended.load(Ordering::Relaxed))
    }
}

/// The queue sampled answers go to, and its worker.
pub struct OnlineJudge {
    tx: mpsc::Sender<Sampled>,
    rx: std::sync::Mutex<Option<mpsc::Receiver<Sampled>>>,
    concurrency: usize,
    observer: OnceLock<Arc<dyn VerdictObserver>>,
    stats: Arc<JudgeStats>,
}

impl std::fmt::Debug for OnlineJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnlineJudge")
            .field("concurrency", &self.concurrency)
            .finish_non_exhaustive()
    }
}

impl OnlineJudge {
    /// A judge with `config`'s queue and concurrency (fixed at start). Nothing is judged until
    /// the runtime starts its worker (`Runtime::spawn_workers`).
    pub fn new(config: &JudgeConfig) -> Self {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        Self {
            tx,
            rx: std::sync::Mutex::new(Some(rx)),
            concurrency: config.concurrency.max(1),
            observer: OnceLock::new(),
            stats: Arc::new(JudgeStats::default()),
        }
    }

    /// Who sees the verdicts (set once, before the worker starts).
    pub fn observe(&self, observer: Arc<dyn VerdictObserver>) {
        let _ = self.observer.set(observer);
    }

    pub fn stats(&self) -> &JudgeStats {
        &self.stats
    }

    /// Queue a sampled answer; never waits. `false`: the queue was full and it was dropped
    /// (counted).
    pub fn submit(&self, sampled: Sampled) -> bool {
        let route = sampled.route.clone();
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        match self.tx.try_send(sampled) {
            Ok(()) => true,
            Err(_) => {
                self.stats.ended.fetch_add(1, Ordering::Relaxed);
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = self.observer.get() {
                    observer.no_verdict(&route, NoVerdict::QueueFull);
                }
                false
            }
        }
    }

    /// Start the worker on the current tokio runtime; it ends when `stop` turns true. A second
    /// call starts nothing.
    pub(crate) fn spawn(&self, runtime: Arc<Runtime>, stop: watch::Receiver<bool>) {
        let Some(rx) = self.rx.lock().ok().and_then(|mut rx| rx.take()) else { return };
        let worker = Worker {
            runtime,
            observer: self.observer.get().cloned(),
            stats: self.stats.clone(),
            slots: Arc::new(Semaphore::new(self.concurrency)),
        };
        tokio::spawn(worker.run(rx, stop));
    }
}

#[derive(Clone)]
struct Worker {
    runtime: Arc<Runtime>,
    observer: Option<Arc<dyn VerdictObserver>>,
    stats: Arc<JudgeStats>,
    slots: Arc<Semaphore>,
}

impl Worker {
    async fn run(self, mut rx: mpsc::Receiver<Sampled>, mut stop: watch::Receiver<bool>) {
        loop {
            let sampled = tokio::select! {
                sampled = rx.recv() => match sampled {
                    Some(sampled) => sampled,
                    None => return,
                },
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        return;
                    }
                    continue;
                }
            };
            let Ok(slot) = self.slots.clone().acquire_owned().await else { return };
            let worker = self.clone();
            tokio::spawn(async move {
                worker.judge(sampled).await;
                worker.stats.ended.fetch_add(1, Ordering::Relaxed);
                drop(slot);
            });
        }
    }

    fn no_verdict(&self, route: &str, why: NoVerdict) {
        tracing::warn!(route, reason = why.as_str(), "the online judge gave no verdict");
        if let Some(observer) = &self.observer {
            observer.no_verdict(route, why);
        }
    }

    /// One sampled answer through the judge route, and its verdict stored.
    async fn judge(&self, sampled: Sampled) {
        let snapshot = self.runtime.current();
        let config = &snapshot.config.judge;
        let (Some(judge_route), Some(judging)) = (&config.route, config.of(&sampled.route)) else {
            // Judging was turned off for this route by a reload since the answer was drawn.
            return;
        };
        let prompt = rubric_prompt(
            &judging.rubric,
            sampled.question.as_deref(),
            &sampled.evidence,
            &sampled.answer,
        );
        let request = ChatRequest {
            messages: vec![Message::user(prompt)],
            max_tokens: Some(64),
            temperature: Some(0.0),
            ..ChatRequest::default()
        };
        // The judged call is over: the judge's call is a call of its own, on its own deadline.
        let ctx = CallContext::with_deadline(config.timeout);
        let done = match self.runtime.engine.complete(ctx, judge_route, request).await {
            Ok(done) if done.report.served_by.is_some() => done,
            Ok(_) | Err(_) => return self.no_verdict(&sampled.route, NoVerdict::JudgeFailed),
        };
        let Some(pass) = read_verdict(&done.response.text) else {
            return self.no_verdict(&sampled.route, NoVerdict::Unreadable);
        };
        let keep = config.keep_content;
        let verdict = Verdict {
            request_id: sampled.request_id,
            trace_id: sampled.trace_id,
            at_unix_ms: sampled.at_unix_ms,
            judged_unix_ms: i64::try_from(rein_core::clock::unix_ms()).unwrap_or(i64::MAX),
            route: sampled.route,
            tier: sampled.tier,
            model: sampled.model,
            labels: sampled.labels,
            pass,
            score: if pass { 1.0 } else { 0.0 },
            probability: sampled.draw.probability,
            base: sampled.draw.base,
            rubric: judging.rubric.clone(),
            judge_model: Some(done.response.model.clone()),
            reply: done.response.text.chars().take(REPLY_CHARS).collect(),
            question: sampled.question.filter(|_| keep),
            answer: keep.then_some(sampled.answer),
            evidence: if keep { sampled.evidence } else { Vec::new() },
        };
        match self.runtime.tool_store().verdict_record(&verdict).await {
            Ok(_) => {
                self.stats.judged.fetch_add(1, Ordering::Relaxed);
                if let Some(observer) = &self.observer {
                    observer.judged(&verdict);
                }
            }
            Err(error) => {
                tracing::warn!(%error, "a verdict could not be stored");
                self.no_verdict(&verdict.route, NoVerdict::StoreFailed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn sampled(n: u32) -> Sampled {
        Sampled {
            at_unix_ms: 0,
            request_id: format!("req_{n}"),
            trace_id: String::new(),
            route: "support".into(),
            tier: None,
            model: None,
            labels: BTreeMap::new(),
            draw: Draw { probability: 1.0, base: true },
            question: None,
            evidence: Vec::new(),
            answer: "Changes close 48 hours before delivery.".into(),
        }
    }

    #[derive(Default)]
    struct Seen(std::sync::Mutex<Vec<(String, &'static str)>>);

    impl VerdictObserver for Seen {
        fn judged(&self, _: &Verdict) {}

        fn no_verdict(&self, route: &str, why: NoVerdict) {
            self.0.lock().unwrap().push((route.to_string(), why.as_str()));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_queue_drops_and_counts_and_never_waits() {
        // No worker: nothing drains the queue of two.
        let config = JudgeConfig { queue: 2, ..JudgeConfig::default() };
        let judge = OnlineJudge::new(&config);
        let seen = Arc::new(Seen::default());
        judge.observe(seen.clone());
        assert!(judge.submit(sampled(1)));
        assert!(judge.submit(sampled(2)));
        assert!(!judge.submit(sampled(3)));
        assert_eq!(judge.stats().dropped.load(Ordering::Relaxed), 1);
        assert_eq!(judge.stats().pending(), 2, "the dropped one waits for nothing");
        assert_eq!(*seen.0.lock().unwrap(), vec![("support".to_string(), "queue_full")]);
    }
}
