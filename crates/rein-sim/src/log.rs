//! The attempt log: one JSON line per request received, appended to a file when one is
//! configured (flushed per line, so a drill can tail it), and its newest entries kept in memory
//! for `GET /_sim/log` and [`crate::SimHandle::log`] (at most [`DEFAULT_LOG_KEEP`] unless told
//! otherwise: a simulator answering for hours, as the embedded default's do, must not hold every
//! request it ever saw). Secrets never enter it: of `authorization` / `x-api-key` only their
//! presence is recorded.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::SimError;

/// One request the simulator received and what it did with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Wall-clock time of the request, Unix milliseconds (advances with tokio's clock).
    pub unix_ms: u64,
    /// Milliseconds since the simulator started or was last reset.
    pub elapsed_ms: u64,
    pub method: String,
    pub path: String,
    /// `openai` or `anthropic`; absent for paths of neither.
    pub format: Option<String>,
    /// The request's `model`, when it had one.
    pub model: Option<String>,
    pub stream: bool,
    /// The step applied, as written (`ok` when healthy; `bad_spec` when the spec was invalid).
    pub fault: String,
    /// Where the fault came from.
    pub fault_source: FaultSource,
    /// The whole script when the fault came from one (`529,529,ok`).
    pub script: Option<String>,
    /// 1-based position in the script of the step applied.
    pub script_step: Option<u32>,
    /// The scenario phase in force, if any (whether or not it applied to this request).
    pub phase: Option<String>,
    /// The scenario `[[reply]]` rule (0-based) whose text answered, if any.
    #[serde(default)]
    pub reply_rule: Option<u32>,
    /// Hash of (model, messages, path): requests with the same key walk one script.
    pub sequence_key: String,
    /// The status sent; absent when no response was sent (`reset`, `hang`).
    pub status: Option<u16>,
    /// The request id the simulator returned in `x-request-id` / `request-id`.
    pub request_id: Option<String>,
    /// The request's `idempotency-key` header.
    pub idempotency_key: Option<String>,
    /// The request's own `x-request-id` header.
    pub client_request_id: Option<String>,
    /// Whether `authorization`, `x-api-key` or `x-goog-api-key` was present (their values are
    /// never logged).
    pub auth_present: bool,
}

/// Where a request's fault came from, in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultSource {
    /// The `x-sim-fault` request header.
    Header,
    /// The request's `model`, of the form `sim:<spec>`.
    Model,
    /// The active scenario phase.
    Scenario,
    /// No fault applied.
    None,
}

/// The in-memory log and its optional file.
#[derive(Debug)]
pub(crate) struct AttemptLog {
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The newest entries, oldest first.
    entries: VecDeque<LogEntry>,
    /// The most `entries` holds.
    keep: usize,
    /// Entries no longer in memory, since the start or the last reset.
    dropped: u64,
    file: Option<File>,
}

/// How many entries the in-memory log keeps when not told: at about half a KiB an entry, a few
/// MiB. The file keeps every one.
pub const DEFAULT_LOG_KEEP: usize = 10_000;

fn lock(mutex: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    // A panic while holding the lock leaves the log as it was: still usable.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl AttemptLog {
    /// The log, appending to `path` when given and keeping the newest `keep` entries in memory.
    pub(crate) fn open(path: Option<&Path>, keep: usize) -> Result<AttemptLog, SimError> {
        let file = match path {
            Some(path) => Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| SimError::Log { path: path.to_owned(), source })?,
            ),
            None => None,
        };
        let inner = Inner { entries: VecDeque::new(), keep, dropped: 0, file };
        Ok(AttemptLog { inner: Mutex::new(inner) })
    }

    pub(crate) fn record(&self, entry: LogEntry) {
        let mut inner = lock(&self.inner);
        if let Some(file) = inner.file.as_mut() {
            match serde_json::to_string(&entry) {
                Ok(mut line) => {
                    line.push('\n');
                    if let Err(error) = file.write_all(line.as_bytes()).and_then(|()| file.flush())
                    {
                        tracing::warn!(%error, "rein sim: cannot write the attempt log");
                    }
                }
                Err(error) => tracing::warn!(%error, "rein sim: cannot serialise a log entry"),
            }
        }
        inner.entries.push_back(entry);
        while inner.entries.len() > inner.keep {
            inner.entries.pop_front();
            inner.dropped += 1;
        }
    }

    /// The entries kept in memory, oldest first.
    pub(crate) fn entries(&self) -> Vec<LogEntry> {
        self.snapshot().0
    }

    /// The entries kept in memory, oldest first, and how many older ones are no longer kept, as
    /// of one moment (read under one lock: the count always says where the entries start).
    pub(crate) fn snapshot(&self) -> (Vec<LogEntry>, u64) {
        let inner = lock(&self.inner);
        (inner.entries.iter().cloned().collect(), inner.dropped)
    }

    /// How many entries are no longer in memory (since the start or the last reset).
    pub(crate) fn dropped(&self) -> u64 {
        lock(&self.inner).dropped
    }

    /// Forgets the in-memory entries (the file keeps its history).
    pub(crate) fn clear(&self) {
        let mut inner = lock(&self.inner);
        inner.entries.clear();
        inner.dropped = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64) -> LogEntry {
        LogEntry {
            unix_ms: 0,
            elapsed_ms: seq,
            method: "POST".to_string(),
            path: "/v1/chat/completions".to_string(),
            format: None,
            model: None,
            stream: false,
            fault: "ok".to_string(),
            fault_source: FaultSource::None,
            script: None,
            script_step: None,
            phase: None,
            reply_rule: None,
            sequence_key: String::new(),
            status: Some(200),
            request_id: None,
            idempotency_key: None,
            client_request_id: None,
            auth_present: false,
        }
    }

    /// While requests keep landing, every snapshot's dropped count is the sequence number of its
    /// oldest entry: the two are read at one moment, never the entries before a request and
    /// the count after it.
    #[test]
    fn a_snapshot_reads_the_entries_and_the_dropped_count_at_one_moment() {
        let log = std::sync::Arc::new(AttemptLog::open(None, 3).unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (log, stop) = (std::sync::Arc::clone(&log), std::sync::Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seq = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    log.record(entry(seq));
                    seq += 1;
                }
                seq
            })
        };
        let mut checked = 0;
        while checked < 20_000 {
            let (entries, dropped) = log.snapshot();
            if let Some(first) = entries.first() {
                assert_eq!(first.elapsed_ms, dropped, "{} entries", entries.len());
                checked += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let sent = writer.join().unwrap();
        let (entries, dropped) = log.snapshot();
        assert_eq!((entries.len() as u64, dropped), (3, sent - 3));
    }
}
