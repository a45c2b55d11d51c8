//! Where rein's log lines go. `rein serve` hands each line to a thread of its own through a
//! bounded queue, so whatever reads its stderr (a terminal, a pipe to a log shipper, a container
//! runtime) may stop reading without stopping the gateway: a full pipe blocks that thread, never
//! an event loop. Past the queue's room a line is dropped and counted
//! (`rein_log_lines_dropped_total`), as the recorder drops a call's record rather than hold the
//! call. The other commands write stderr directly: they are short, and nothing waits on them.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::fmt::writer::BoxMakeWriter;

/// Lines `rein serve` holds for its log thread by default (about 2 MiB of lines at most).
pub(crate) const DEFAULT_QUEUE: u32 = 8_192;

/// How many bytes the log thread gathers before it writes (it writes sooner when the queue is
/// empty): a busy gateway's lines leave in a few writes, not one each.
const WRITE_BUFFER: usize = 64 * 1024;

/// The installed log writer; dropping it writes what is queued (waiting at most about a second
/// when nothing reads stderr).
pub(crate) struct Logs {
    _thread: Option<WorkerGuard>,
}

/// Install the process's log subscriber: `json` lines or text, on stderr; through a queue of
/// `queue` lines and a thread of its own when given one, else written directly.
pub(crate) fn init(json: bool, queue: Option<usize>) -> Logs {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org).
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let (writer, thread) = match queue {
        Some(lines) => {
            let stderr = std::io::BufWriter::with_capacity(WRITE_BUFFER, std::io::stderr());
            let (writer, thread) = NonBlockingBuilder::default()
                .buffered_lines_limit(lines)
                .lossy(true)
                .thread_name("rein-log")
                .finish(stderr);
            let dropped = writer.error_counter();
            rein_gateway::metrics::count_dropped_log_lines(move || dropped.dropped_lines() as u64);
            (BoxMakeWriter::new(writer), Some(thread))
        }
        None => (BoxMakeWriter::new(std::io::stderr), None),
    };
    let logs =
        tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(colour);
    if json {
        logs.json().init();
    } else {
        logs.init();
    }
    Logs { _thread: thread }
}
