//! Where rein's log lines go. `rein serve` hands each line to a thread of its own through a
//! bounded queue, so whatever reads its stderr (a terminal, a pipe to a log shipper, a container
//! runtime) may stop reading without stopping the gateway: a full pipe blocks that thread, never
//! an event loop. Past the queue's room a line is dropped and counted
//! (`rein_log_lines_dropped_total`), as the recorder drops a call's record rather than hold the
//! call. The other commands write stderr directly: they are short, and nothing waits on them.
//!
//! A line reads as `tracing_subscriber`'s default format writes it; two of its parts are written
//! more cheaply, since the gateway logs a line a call at the default level: the time, whose date
//! and second are formatted once a second ([`Clock`]), and the fields that are plain numbers or
//! plain text ([`Fields`]). Anything else goes to the default formatter.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::{DefaultVisitor, Writer};
use tracing_subscriber::fmt::time::FormatTime;
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
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(colour)
        .with_timer(Clock);
    if json {
        logs.json().init();
    } else {
        logs.fmt_fields(Fields).init();
    }
    Logs { _thread: thread }
}

/// The time of a line as `tracing_subscriber`'s `SystemTime` writes it
/// (`2026-12-07T03:05:06.767089Z`, UTC), its date and second formatted once a second a thread.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Clock;

thread_local! {
    /// The second last written by this thread, and its text up to the fraction.
    static SECOND: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        let now = rein_core::clock::unix_micros();
        write_time(w, now / 1_000_000, (now % 1_000_000) as u32)
    }
}

/// `secs` and `micros` past the Unix epoch as a line's time.
fn write_time(w: &mut impl std::fmt::Write, secs: u64, micros: u32) -> std::fmt::Result {
    SECOND.with_borrow_mut(|(second, text)| {
        if *second != secs {
            text.clear();
            let at = i64::try_from(secs)
                .ok()
                .and_then(|secs| time::OffsetDateTime::from_unix_timestamp(secs).ok())
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
            let _ = write!(
                text,
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                at.year(),
                u8::from(at.month()),
                at.day(),
                at.hour(),
                at.minute(),
                at.second()
            );
            *second = secs;
        }
        w.write_str(text)
    })?;
    let mut fraction = [b'0'; 8];
    fraction[0] = b'.';
    fraction[7] = b'Z';
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(micros.min(999_999)).as_bytes();
    fraction[7 - digits.len()..7].copy_from_slice(digits);
    w.write_str(std::str::from_utf8(&fraction).unwrap_or(".000000Z"))
}

/// The fields of a text line as `tracing_subscriber`'s `DefaultFields` writes them: numbers,
/// booleans and plain text (printable ASCII without a quote or a backslash, quoted as `Debug`
/// quotes it) written directly without colour; the message, anything else, and every field when
/// the line is coloured, by the default visitor.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Fields;

impl<'a> MakeVisitor<Writer<'a>> for Fields {
    type Visitor = FieldsVisitor<'a>;

    fn make_visitor(&self, target: Writer<'a>) -> Self::Visitor {
        FieldsVisitor { writer: target, is_empty: true, result: Ok(()) }
    }
}

pub(crate) struct FieldsVisitor<'a> {
    writer: Writer<'a>,
    is_empty: bool,
    result: std::fmt::Result,
}

impl FieldsVisitor<'_> {
    /// Whether `field` is written here: a plain name (not the message, not a raw identifier,
    /// not the `log` crate's metadata) on an uncoloured line.
    fn plain(&self, field: &Field) -> bool {
        let name = field.name();
        self.result.is_ok()
            && !self.writer.has_ansi_escapes()
            && name != "message"
            && !name.starts_with("r#")
            && !name.starts_with("log.")
    }

    /// `name=` and the value `write` writes, after a space unless it is the first field.
    fn write(&mut self, field: &Field, write: impl FnOnce(&mut Writer<'_>) -> std::fmt::Result) {
        if !std::mem::take(&mut self.is_empty) {
            self.result = self.writer.write_char(' ');
        }
        if self.result.is_ok() {
            self.result = self.writer.write_str(field.name());
        }
        if self.result.is_ok() {
            self.result = self.writer.write_char('=');
        }
        if self.result.is_ok() {
            self.result = write(&mut self.writer);
        }
    }

    /// The field as the default visitor writes it.
    fn default(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        default.record_debug(field, value);
        self.result = default.finish();
        // The default visitor skips the `log` crate's metadata without writing anything.
        self.is_empty &= field.name().starts_with("log.");
    }
}

impl Visit for FieldsVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        let plain_text = value.bytes().all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\');
        if plain_text && self.plain(field) {
            self.write(field, |w| {
                w.write_char('"')?;
                w.write_str(value)?;
                w.write_char('"')
            });
        } else if field.name() == "message" {
            self.default(field, &format_args!("{value}"));
        } else {
            self.default(field, &value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if self.plain(field) {
            self.write(field, |w| w.write_str(itoa::Buffer::new().format(value)));
        } else {
            self.default(field, &value);
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if self.plain(field) {
            self.write(field, |w| w.write_str(itoa::Buffer::new().format(value)));
        } else {
            self.default(field, &value);
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        if self.plain(field) {
            self.write(field, |w| w.write_str(if value { "true" } else { "false" }));
        } else {
            self.default(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        if self.result.is_err() {
            return;
        }
        let mut default = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        default.record_error(field, value);
        self.result = default.finish();
        self.is_empty = false;
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.default(field, value);
    }
}

impl VisitOutput<std::fmt::Result> for FieldsVisitor<'_> {
    fn finish(self) -> std::fmt::Result {
        self.result
    }
}

impl VisitFmt for FieldsVisitor<'_> {
    fn writer(&mut self) -> &mut dyn std::fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Lines written into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[derive(Debug)]
    struct Failed;

    impl std::fmt::Display for Failed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("the store is \"down\"")
        }
    }

    impl std::error::Error for Failed {}

    /// Every kind of field the gateway logs, and what the fast path must leave alone.
    fn events() {
        let texts = [
            "req_0bffe632e608aab11664a20567d2afad",
            "",
            "a \"quoted\" word",
            "back\\slash",
            "tab\there",
            "line\nbreak",
            "\u{1b}[31mred",
            "ünïcödé ✓",
            "it's",
            "~ and } and {",
        ];
        for text in texts {
            tracing::info!(request_id = text, route = %text, "call finished");
            tracing::warn!(text, "a message with a field named like a variable");
            tracing::info!(message = text);
            tracing::info!("{text}");
        }
        for n in [0u64, 7, u64::MAX] {
            tracing::info!(attempts = n, elapsed_ms = n / 2, "call finished");
        }
        for n in [0i64, -1, i64::MIN] {
            tracing::info!(delta = n, "moved");
        }
        tracing::info!(ok = true, stale = false, r#type = "raw", "flags");
        tracing::error!(error = &Failed as &(dyn std::error::Error + 'static), "failed");
        tracing::info!(list = ?[1, 2], float = 1.5, "debug values");
        tracing::info!(first = 1u64, second = "two", third = ?Some(3), fourth = false);
        tracing::info!("");
    }

    fn lines_of(fast: bool, ansi: bool) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let builder = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(ansi)
            .without_time()
            .with_max_level(tracing::Level::TRACE);
        if fast {
            tracing::subscriber::with_default(builder.fmt_fields(Fields).finish(), events);
        } else {
            tracing::subscriber::with_default(builder.finish(), events);
        }
        captured.text()
    }

    #[test]
    fn lines_read_as_the_default_format_writes_them() {
        for ansi in [false, true] {
            let (fast, default) = (lines_of(true, ansi), lines_of(false, ansi));
            assert!(default.lines().count() > 40, "{default}");
            for (fast, default) in fast.lines().zip(default.lines()) {
                assert_eq!(fast, default, "ansi: {ansi}");
            }
            assert_eq!(fast.lines().count(), default.lines().count());
        }
    }

    #[test]
    fn the_time_reads_as_the_default_clock_writes_it() {
        let cases = [
            (0, 0, "1970-01-01T00:00:00.000000Z"),
            (1_796_613_906, 767_089, "2026-12-07T03:25:06.767089Z"),
            (1_796_613_906, 5, "2026-12-07T03:25:06.000005Z"),
            (1_796_613_907, 999_999, "2026-12-07T03:25:07.999999Z"),
            (951_782_400, 120_000, "2000-02-29T00:00:00.120000Z"),
            (253_402_300_799, 1, "9999-12-31T23:59:59.000001Z"),
        ];
        for (secs, micros, text) in cases {
            let mut line = String::new();
            write_time(&mut line, secs, micros).unwrap();
            assert_eq!(line, text);
        }
        // The clock itself, against the default one read around it (the same minute unless it
        // turned between the reads).
        let mut ours = String::new();
        Clock.format_time(&mut Writer::new(&mut ours)).unwrap();
        let mut theirs = String::new();
        let default = tracing_subscriber::fmt::time::SystemTime;
        default.format_time(&mut Writer::new(&mut theirs)).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{ours} / {theirs}");
        assert_eq!(ours[..16], theirs[..16], "{ours} / {theirs}");
    }
}
