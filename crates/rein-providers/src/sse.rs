//! A small server-sent-events parser: bytes in, `(event, data)` records out, following the
//! WHATWG rules both providers rely on (LF, CRLF or CR line ends, `:` comments, one optional
//! space after the colon, multi-line `data`, a blank line dispatches). It owns no I/O and no
//! JSON; the format decoders interpret `data`.
//!
//! One event is bounded: a line (whether its end has arrived or not), or the `data` lines of one
//! record joined, longer than the parser's `max_event_bytes` is refused, so a stream with no line
//! end (or no blank line) cannot grow a buffer without end, and where the body was cut into
//! chunks never changes what is refused.
//!
//! At end of input a record that never saw its terminating blank line is still handed over,
//! flagged `terminated: false`, so the stream driver can tell a clean last event (some
//! recordings omit the final newline) from a line cut in half by a dropped connection.

use std::borrow::Cow;

/// One dispatched event. Its fields borrow the bytes read when they lie there whole (a record of
/// one `data` line ended in the same chunk, the common case, is not copied); a record whose end
/// comes in a later chunk, or of several `data` lines, is the parser's own joined text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent<'a> {
    /// The `event:` field, when the server named the event.
    pub event: Option<Cow<'a, str>>,
    /// The `data:` lines joined with `\n`.
    pub data: Cow<'a, str>,
    /// False for a record flushed at end of input without its blank line.
    pub terminated: bool,
}

impl SseEvent<'_> {
    #[cfg(test)]
    pub(crate) fn into_owned(self) -> SseEvent<'static> {
        SseEvent {
            event: self.event.map(|event| Cow::Owned(event.into_owned())),
            data: Cow::Owned(self.data.into_owned()),
            terminated: self.terminated,
        }
    }
}

/// Why the bytes could not be read as SSE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SseError {
    /// A line was not UTF-8.
    InvalidUtf8,
    /// A line, or one record's data, longer than the parser's event limit: not an event
    /// stream, or a broken one.
    EventTooLarge,
}

#[derive(Debug)]
pub(crate) struct SseParser {
    /// The longest line, and the longest joined `data` of one record, accepted.
    max_event: usize,
    buffer: Vec<u8>,
    open: Open,
    /// How many bytes at the front of `buffer` are known to hold no line end, so a long line
    /// arriving in many chunks is scanned once, not once per chunk.
    scanned: usize,
}

impl SseParser {
    pub(crate) fn new(max_event_bytes: usize) -> Self {
        Self { max_event: max_event_bytes, buffer: Vec::new(), open: Open::default(), scanned: 0 }
    }

    /// Feeds a chunk and appends every event it completes, as owned events.
    #[cfg(test)]
    pub(crate) fn push(
        &mut self,
        chunk: &[u8],
        out: &mut Vec<SseEvent<'static>>,
    ) -> Result<(), SseError> {
        self.push_with(chunk, |event| out.push(event.into_owned()))
    }

    /// Ends the input, as [`Self::finish_with`], appending owned events.
    #[cfg(test)]
    pub(crate) fn finish(&mut self, out: &mut Vec<SseEvent<'static>>) -> Result<(), SseError> {
        self.finish_with(|event| out.push(event.into_owned()))
    }

    /// Feeds a chunk and hands `emit` every event it completes, in order.
    pub(crate) fn push_with(
        &mut self,
        chunk: &[u8],
        mut emit: impl FnMut(SseEvent<'_>),
    ) -> Result<(), SseError> {
        // Lines wholly inside `chunk` are read where they lie; only a line still open at the
        // end of a chunk is buffered.
        let (input, buffered): (&[u8], bool) = if self.buffer.is_empty() {
            (chunk, false)
        } else {
            self.buffer.extend_from_slice(chunk);
            (&self.buffer, true)
        };
        let mut record = Record::new(self.max_event, &mut self.open);
        let mut start = 0;
        let mut skip = std::mem::take(&mut self.scanned);
        let mut scanned = 0;
        let result = loop {
            let rest = &input[start..];
            let Some(pos) = memchr::memchr2(b'\n', b'\r', &rest[skip..]) else {
                scanned = rest.len();
                break Ok(());
            };
            let pos = skip + pos;
            skip = 0;
            // The same bound as on a line still open below, whether or not its end arrived in
            // the same chunk, and before its bytes are read: the events never depend on how
            // the body was cut.
            if pos > self.max_event {
                break Err(SseError::EventTooLarge);
            }
            let mut consumed = pos + 1;
            if rest[pos] == b'\r' {
                match rest.get(pos + 1) {
                    // A CR at the very end may be the first half of a CRLF: wait for more.
                    None => {
                        scanned = pos;
                        break Ok(());
                    }
                    Some(b'\n') => consumed += 1,
                    Some(_) => {}
                }
            }
            start += consumed;
            if let Err(error) = record.line(&rest[..pos], &mut emit) {
                break Err(error);
            }
        };
        // A record still open keeps what it borrowed as its own text: the bytes go.
        record.keep();
        self.scanned = scanned;
        if buffered {
            self.buffer.drain(..start);
        } else {
            self.buffer.extend_from_slice(&chunk[start..]);
        }
        // The open line, less a CR held back in case an LF follows it.
        let open = self.buffer.len() - usize::from(self.buffer.last() == Some(&b'\r'));
        if result.is_ok() && open > self.max_event {
            return Err(SseError::EventTooLarge);
        }
        result
    }

    /// Ends the input: a final unterminated line is processed, and a pending record is handed
    /// over with `terminated: false`.
    pub(crate) fn finish_with(
        &mut self,
        mut emit: impl FnMut(SseEvent<'_>),
    ) -> Result<(), SseError> {
        let mut rest = std::mem::take(&mut self.buffer);
        self.scanned = 0;
        let mut record = Record::new(self.max_event, &mut self.open);
        if rest.last() == Some(&b'\r') {
            // A CR held back in case an LF followed: it did end a line (maybe an empty one).
            rest.pop();
            record.line(&rest, &mut emit)?;
        } else if !rest.is_empty() {
            record.line(&rest, &mut emit)?;
        }
        record.keep();
        if let Some(mut data) = self.open.data.take() {
            data.pop();
            let event = self.open.event.take().map(Cow::Owned);
            emit(SseEvent { event, data: Cow::Owned(data), terminated: false });
        }
        Ok(())
    }
}

/// The parser's state for the record being read, borrowed apart from its buffer so that lines
/// can be read straight out of it. What a record's lines hold is kept where it lies in the
/// bytes read (`line_event`, `line_data`: one `data` line) until the record ends or the bytes
/// go ([`Record::keep`]); then, or from a second `data` line on, it is the parser's own text.
struct Record<'a, 'i> {
    max_event: usize,
    open: &'a mut Open,
    line_event: Option<&'i str>,
    line_data: Option<&'i str>,
}

/// What the parser keeps of the record being read between chunks.
#[derive(Debug, Default)]
struct Open {
    event: Option<String>,
    data: Option<String>,
    seen_first_line: bool,
}

impl<'a, 'i> Record<'a, 'i> {
    fn new(max_event: usize, open: &'a mut Open) -> Self {
        Record { max_event, open, line_event: None, line_data: None }
    }

    fn line(
        &mut self,
        line: &'i [u8],
        emit: &mut impl FnMut(SseEvent<'_>),
    ) -> Result<(), SseError> {
        let mut line = simdutf8::basic::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
        if !self.open.seen_first_line {
            self.open.seen_first_line = true;
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            let event = self.line_event.take().map(Cow::Borrowed);
            let event = event.or_else(|| self.open.event.take().map(Cow::Owned));
            if let Some(data) = self.line_data.take() {
                emit(SseEvent { event, data: Cow::Borrowed(data), terminated: true });
            } else if let Some(mut data) = self.open.data.take() {
                data.pop();
                emit(SseEvent { event, data: Cow::Owned(data), terminated: true });
            }
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if let Some(first) = self.line_data.take() {
                    // A second line: the record's text is joined in the parser's own string.
                    self.open.data = Some(owned_line(first, value.len() + 1));
                }
                match self.open.data.as_mut() {
                    Some(data) => {
                        if data.len() + value.len() > self.max_event {
                            return Err(SseError::EventTooLarge);
                        }
                        data.push_str(value);
                        data.push('\n');
                    }
                    None if value.len() > self.max_event => return Err(SseError::EventTooLarge),
                    None => self.line_data = Some(value),
                }
            }
            "event" => {
                self.open.event = None;
                self.line_event = Some(value);
            }
            // `id` and `retry` steer browser reconnection; an LLM stream is never resumed.
            _ => {}
        }
        Ok(())
    }

    /// Makes what the open record borrowed from the bytes read its own, before they go.
    fn keep(&mut self) {
        if let Some(event) = self.line_event.take() {
            self.open.event = Some(event.to_owned());
        }
        if let Some(first) = self.line_data.take() {
            self.open.data = Some(owned_line(first, 0));
        }
    }
}

/// A record's first `data` line as the parser's own text, ended with its `\n`, with room for
/// `more` bytes after it.
fn owned_line(line: &str, more: usize) -> String {
    let mut data = String::with_capacity(line.len() + 1 + more);
    data.push_str(line);
    data.push('\n');
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 16 * 1024 * 1024;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent<'static>> {
        let mut parser = SseParser::new(MAX);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out).unwrap();
        }
        parser.finish(&mut out).unwrap();
        out
    }

    fn event(name: Option<&str>, data: &str) -> SseEvent<'static> {
        let event = name.map(|name| Cow::Owned(name.to_owned()));
        SseEvent { event, data: Cow::Owned(data.to_owned()), terminated: true }
    }

    #[test]
    fn parses_named_events_and_comments() {
        let out = parse_all(&[b": keepalive\nevent: ping\ndata: {}\n\ndata: x\n\n"]);
        assert_eq!(out, vec![event(Some("ping"), "{}"), event(None, "x")]);
    }

    /// A record of one `data` line that ends in the bytes its line was read from is handed over
    /// where it lies (the chunk, or the parser's buffer for a line the chunk completed), its
    /// name too; one whose end comes in a later chunk, or of several lines, is its own text.
    #[test]
    fn a_record_read_whole_in_a_chunk_is_not_copied() {
        let mut parser = SseParser::new(MAX);
        let mut seen = Vec::new();
        let mut push = |parser: &mut SseParser, chunk: &[u8]| {
            parser
                .push_with(chunk, |event| {
                    let borrowed = matches!(event.data, Cow::Borrowed(_))
                        && event.event.as_ref().is_none_or(|e| matches!(e, Cow::Borrowed(_)));
                    seen.push((event.into_owned(), borrowed));
                })
                .unwrap();
        };
        push(&mut parser, b"event: delta\ndata: {\"a\":1}\n\ndata: b");
        push(&mut parser, b"c\n\nevent: x\ndata: 1\n");
        push(&mut parser, b"data: 2\n\ndata: 3\ndata: 4\n\n");
        let expected = [
            (event(Some("delta"), "{\"a\":1}"), true),
            (event(None, "bc"), true),
            (event(Some("x"), "1\n2"), false),
            (event(None, "3\n4"), false),
        ];
        assert_eq!(seen, expected);
        // A line read whole before its record's end is kept as it was when the chunk goes.
        let mut parser = SseParser::new(MAX);
        let mut out = Vec::new();
        parser.push(b"event: e\ndata: kept\n", &mut out).unwrap();
        parser.push(b"\n", &mut out).unwrap();
        assert_eq!(out, vec![event(Some("e"), "kept")]);
    }

    #[test]
    fn handles_crlf_split_across_chunks_and_multiline_data() {
        let out = parse_all(&[b"data: a\r", b"\ndata:b\r\n\r", b"\n"]);
        assert_eq!(out, vec![event(None, "a\nb")]);
    }

    #[test]
    fn lone_cr_ends_a_line() {
        let out = parse_all(&[b"data: a\r\rdata: b\r\r"]);
        assert_eq!(out, vec![event(None, "a"), event(None, "b")]);
    }

    #[test]
    fn event_without_data_is_not_dispatched() {
        let out = parse_all(&[b"event: ping\n\ndata: y\n\n"]);
        assert_eq!(out, vec![event(None, "y")]);
    }

    #[test]
    fn unterminated_tail_is_flagged() {
        let out = parse_all(&[b"data: whole\n\ndata: {\"half"]);
        assert_eq!(out.len(), 2);
        assert!(out[0].terminated);
        assert_eq!(out[1], SseEvent { event: None, data: "{\"half".into(), terminated: false });
    }

    #[test]
    fn strips_a_leading_bom_and_keeps_inner_whitespace() {
        let out = parse_all(&["\u{feff}data:   {\"a\": 1}  \n\n".as_bytes()]);
        assert_eq!(out, vec![event(None, "  {\"a\": 1}  ")]);
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        let input = b"event: message_start\ndata: {\"type\":\"message_start\"}\n\ndata: [DONE]\n\n";
        let whole = parse_all(&[input]);
        let singles: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(parse_all(&singles), whole);
    }

    #[test]
    fn every_split_into_three_pieces_matches_whole() {
        // LF, CRLF and lone CR line ends, a comment, multi-line data and a BOM, cut everywhere.
        let input =
            "\u{feff}: hi\r\nevent: a\rdata: x\r\ndata: y\n\ndata: caf\u{e9}\r\n\r\ndata: z\n\n"
                .as_bytes();
        let whole = parse_all(&[input]);
        assert_eq!(whole.len(), 3, "{whole:?}");
        for i in 0..=input.len() {
            for j in i..=input.len() {
                let pieces = [&input[..i], &input[i..j], &input[j..]];
                assert_eq!(parse_all(&pieces), whole, "cut at {i} and {j}");
            }
        }
    }

    /// A line past the limit is refused whether its end arrives in the same chunk or later, and
    /// before its bytes are read as text; a line at the limit passes, also with its CR held back
    /// at the end of a chunk.
    #[test]
    fn a_line_past_the_limit_is_refused_however_the_body_is_cut() {
        let run = |chunks: &[&[u8]]| {
            let mut parser = SseParser::new(16);
            let mut out = Vec::new();
            let mut result = Ok(());
            for chunk in chunks {
                result = result.and_then(|()| parser.push(chunk, &mut out));
            }
            (result.and_then(|()| parser.finish(&mut out)), out)
        };
        let long: &[u8] = b"data: ok\n\nevent: seventeen-bytes\n\n";
        let refused = run(&[long]);
        assert_eq!(refused, (Err(SseError::EventTooLarge), vec![event(None, "ok")]));
        for at in 0..long.len() {
            assert_eq!(run(&[&long[..at], &long[at..]]), refused, "cut at {at}");
        }
        // Not UTF-8 and too long: too long, in one chunk as in two.
        let both: &[u8] = b"data: \xff\xfe0123456789012\n\n";
        assert_eq!(run(&[both]).0, Err(SseError::EventTooLarge));
        assert_eq!(run(&[&both[..10], &both[10..]]).0, Err(SseError::EventTooLarge));
        // Sixteen bytes pass, with a CRLF split across chunks.
        let at_limit = run(&[b"data: 0123456789\r", b"\n\r\n"]);
        assert_eq!(at_limit, (Ok(()), vec![event(None, "0123456789")]));
    }

    #[test]
    fn invalid_utf8_is_reported() {
        let mut parser = SseParser::new(MAX);
        let mut out = Vec::new();
        assert_eq!(parser.push(b"data: \xff\xfe\n\n", &mut out), Err(SseError::InvalidUtf8));
    }

    /// Lines long enough to be checked many bytes a step: what is not UTF-8 anywhere in them
    /// (a stray continuation byte, an overlong form, a surrogate, a character cut short, a code
    /// point past U+10FFFF) is refused; every well-formed character passes.
    #[test]
    fn a_long_line_is_checked_as_utf8_wherever_its_bad_byte_is() {
        let bad: [&[u8]; 6] =
            [b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\xff"];
        for at in [0, 1, 31, 32, 33, 63, 64, 100] {
            for bytes in bad {
                let mut line = b"data: ".to_vec();
                line.extend(std::iter::repeat_n(b'a', at));
                line.extend_from_slice(bytes);
                line.extend(std::iter::repeat_n(b'b', 70));
                line.extend_from_slice(b"\n\n");
                let mut out = Vec::new();
                let read = SseParser::new(MAX).push(&line, &mut out);
                assert_eq!(read, Err(SseError::InvalidUtf8), "{bytes:?} after {at}");
            }
            let text =
                format!("{}\u{e9}\u{20ac}\u{1f600}\u{10ffff}{}", "a".repeat(at), "b".repeat(70));
            assert_eq!(parse_all(&[format!("data: {text}\n\n").as_bytes()]), [event(None, &text)]);
        }
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut parser = SseParser::new(MAX);
        let mut out = Vec::new();
        let block = vec![b'x'; 1024 * 1024];
        let mut result = Ok(());
        for _ in 0..=(MAX / block.len()) {
            result = parser.push(&block, &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLarge));
    }

    /// Short `data` lines that never reach the blank line ending their record add up to one
    /// event; past the limit it is refused, however short each line is.
    #[test]
    fn an_endless_record_of_short_lines_is_refused() {
        let mut parser = SseParser::new(1000);
        let mut out = Vec::new();
        let mut result = Ok(());
        for _ in 0..200 {
            result = parser.push(b"data: xxxxxxxxxx\n", &mut out);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::EventTooLarge));
        assert!(out.is_empty());
        // Records under the limit pass.
        let mut parser = SseParser::new(1000);
        for _ in 0..200 {
            parser.push(b"data: xxxxxxxxxx\n\n", &mut out).unwrap();
        }
        assert_eq!(out.len(), 200);
    }
}
