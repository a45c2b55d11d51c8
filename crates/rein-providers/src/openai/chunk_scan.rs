//! A direct reader for the Chat Completions chunk every OpenAI-compatible stream is made of: a
//! content, refusal or reasoning delta, or a finish reason, around the fields rein ignores. It
//! fills the same [`Chunk`] serde would in one pass over the bytes (from a stream's second
//! chunk on, from where the bytes its chunks repeat end: [`Resume`]; and of a text delta shaped
//! as the stream's last one, only the new text: [`Shape`]), and says `None` (the
//! caller then asks serde_json) for anything outside what it reads exactly: tool-call
//! fragments, log probabilities, an error object, a key spelled with an escape, a duplicate
//! field, a string serde would refuse, numbers past `u32`, nesting past 64. What it accepts it
//! reads as serde does: debug builds and the fuzz targets check every chunk it reads against
//! serde's reading.
//!
//! Why not serde: decoding the upstream's chunks was 46 % of the instructions of a checked call
//! over an SSE upstream, 6,400 a 290-byte chunk in serde_json (its visitors' per-token work for
//! fourteen keys and their values); this reads one in about 2,200, and from the shape of the
//! last, the 290 bytes of a stream's typical text delta in about 750.

use std::borrow::Cow;
use std::ops::Range;

use super::stream::{Choice, Chunk, Delta};
use super::wire::{WireUsage, scan_choices};
use crate::json_scan::{Scan, first};

/// Where the last chunk of a stream was left: its bytes before the key `choices`, and what
/// reading them had found. A stream's chunks repeat those bytes (the id, the object type, the
/// time, the model, the fingerprint), so when the next chunk starts with them the reader takes
/// up where it was left at that byte instead of reading them again: the reader is
/// deterministic, so its state at that point is the same.
#[derive(Debug, Default)]
pub(super) struct Resume {
    head: Vec<u8>,
    seen: u8,
    id: Option<Range<usize>>,
    model: Option<Range<usize>>,
    /// The last text delta read after `head`, as the bytes around its content.
    shape: Option<Shape>,
}

/// A text delta's bytes after a stream's repeated head, but for its content: most chunks of a
/// stream are the same bytes around a new piece of text (and, at OpenAI, a random padding
/// string last). A chunk that is `head`, `before`, a string, `after` (and, when `padded`, a
/// string and `}`) is the same chunk as the one these bytes came from but for its content: the
/// reader is deterministic, and only the strings differ, each of which it checks as it checks
/// any string. So only they are read.
#[derive(Debug)]
struct Shape {
    /// From the key `choices` to the content's opening quote.
    before: Vec<u8>,
    /// From the content's closing quote on: to the end, or to the padding's opening quote.
    after: Vec<u8>,
    padded: bool,
    index: Option<u32>,
    /// Where the id and the model lie in `after`, when they come after `choices` (a server that
    /// sorts its keys); before it, they are the head's.
    #[cfg_attr(
        not(any(debug_assertions, fuzzing, test)),
        allow(dead_code, reason = "read only by the checks of debug and fuzz builds")
    )]
    id: Option<Range<usize>>,
    #[cfg_attr(
        not(any(debug_assertions, fuzzing, test)),
        allow(dead_code, reason = "read only by the checks of debug and fuzz builds")
    )]
    model: Option<Range<usize>>,
}

/// The chunk in `data` (already trimmed), or `None` when serde_json must read it. `resume` is
/// the stream's: read from and kept up to date.
#[cfg(test)]
pub(super) fn read<'a>(data: &'a str, resume: &mut Option<Resume>) -> Option<Chunk<'a>> {
    if let Some(chunk) = resume.as_ref().and_then(|resume| shaped(data, resume)) {
        return Some(chunk);
    }
    read_whole(data, resume)
}

/// [`read`] once the chunk is known not to be of the last one's shape ([`text_of_shape`] said
/// so): read from the stream's head on.
pub(super) fn read_whole<'a>(data: &'a str, resume: &mut Option<Resume>) -> Option<Chunk<'a>> {
    let mut scan = Scan { text: data, bytes: data.as_bytes(), at: 0, finite_numbers: false };
    let (chunk, mark, shape) = chunk(&mut scan, resume.as_ref())?;
    scan.whitespace();
    if scan.at != scan.bytes.len() {
        return None;
    }
    match (mark, resume.as_mut()) {
        (Some(mut mark), _) => {
            mark.shape = shape;
            *resume = Some(mark);
        }
        // Read from the head on: the shape is relative to it.
        (None, Some(resume)) if shape.is_some() => resume.shape = shape,
        (None, _) => {}
    }
    Some(chunk)
}

/// A text delta of the last one's shape, as [`text_of_shape`] read it: the chunk is that one's
/// but for this content.
pub(super) struct Shaped<'a> {
    /// The choice's index, as the last one's.
    pub(super) index: Option<u32>,
    pub(super) content: Cow<'a, str>,
    /// Where the content's closing quote ends.
    #[cfg_attr(
        not(any(debug_assertions, fuzzing, test)),
        allow(dead_code, reason = "read only by the checks of debug and fuzz builds")
    )]
    closed: usize,
}

impl<'a> Shaped<'a> {
    /// The whole chunk, as [`read`] gives it (to check it against serde, or to decode it all).
    #[cfg(any(debug_assertions, fuzzing, test))]
    pub(super) fn chunk(self, data: &'a str, resume: &Resume) -> Option<Chunk<'a>> {
        let shape = resume.shape.as_ref()?;
        let closed = self.closed;
        let place = |after: &Option<Range<usize>>, head: &Option<Range<usize>>| match after {
            Some(range) => data.get(closed + range.start..closed + range.end).map(Cow::Borrowed),
            None => head.clone().and_then(|range| data.get(range)).map(Cow::Borrowed),
        };
        let delta = Delta {
            content: Some(self.content.into_owned()),
            refusal: None,
            reasoning_content: None,
            reasoning: None,
            tool_calls: None,
            function_call: None,
        };
        Some(Chunk {
            id: place(&shape.id, &resume.id),
            model: place(&shape.model, &resume.model),
            choices: Some(vec![Choice {
                index: self.index,
                delta: Some(delta),
                finish_reason: None,
                logprobs: None,
            }]),
            usage: None,
            error: None,
        })
    }
}

/// The chunk in `data` when it is a text delta of the last one's shape.
#[cfg(test)]
fn shaped<'a>(data: &'a str, resume: &Resume) -> Option<Chunk<'a>> {
    text_of_shape(data, Some(resume))?.chunk(data, resume)
}

/// `data`'s content when it is a text delta of the last one's shape: only its content (and
/// padding) read. The rest of the chunk is the last one's, so a decoder that has read that one
/// takes the new text alone.
pub(super) fn text_of_shape<'a>(data: &'a str, resume: Option<&Resume>) -> Option<Shaped<'a>> {
    let resume = resume?;
    let shape = resume.shape.as_ref()?;
    let bytes = data.as_bytes();
    let open = resume.head.len() + shape.before.len();
    if bytes.get(..resume.head.len())? != resume.head.as_slice()
        || bytes.get(resume.head.len()..open)? != shape.before.as_slice()
    {
        return None;
    }
    let mut scan = Scan { text: data, bytes, at: open - 1, finite_numbers: false };
    let content = scan.string()?;
    let closed = scan.at;
    let end = closed + shape.after.len();
    if bytes.get(scan.at..end)? != shape.after.as_slice() {
        return None;
    }
    if shape.padded {
        scan.at = end - 1;
        scan.string()?;
        if bytes.get(scan.at..)? != b"}" {
            return None;
        }
    } else if end != bytes.len() {
        return None;
    }
    Some(Shaped { index: shape.index, content, closed })
}

/// Where a borrowed string lies in the text.
fn range_of<'a>(scan: &Scan<'a>, text: Option<&Cow<'a, str>>) -> Option<Range<usize>> {
    match text? {
        Cow::Borrowed(text) => {
            let start = text.as_ptr() as usize - scan.text.as_ptr() as usize;
            Some(start..start + text.len())
        }
        Cow::Owned(_) => None,
    }
}

/// The chunk; the point to resume the stream's next chunk at when this one has a key `choices`
/// and nothing escaped before it; and its shape when it is a text delta alone (one choice, only
/// a content, no finish reason or usage), after `choices`' key and ending the chunk.
type Read<'a> = (Chunk<'a>, Option<Resume>, Option<Shape>);

fn chunk<'a>(scan: &mut Scan<'a>, resume: Option<&Resume>) -> Option<Read<'a>> {
    let mut chunk = Chunk { id: None, model: None, choices: None, usage: None, error: None };
    let mut seen = 0;
    let resumed = resume.filter(|resume| scan.bytes.starts_with(&resume.head));
    match resumed {
        Some(resume) => {
            // The cursor on the quote of `"choices"`, in the object's member loop.
            scan.at = resume.head.len();
            seen = resume.seen;
            chunk.id = resume.id.clone().and_then(|range| scan.text.get(range)).map(Cow::Borrowed);
            chunk.model =
                resume.model.clone().and_then(|range| scan.text.get(range)).map(Cow::Borrowed);
        }
        None => {
            scan.expect(b'{')?;
            if scan.peek()? == b'}' {
                scan.at += 1;
                return Some((chunk, None, None));
            }
        }
    }
    let mut mark = None;
    // Where `choices`' key and its one content string lie, and the last member's string value
    // when it is one rein skips (a padding).
    let mut choices_at = None;
    let content_at = std::cell::Cell::new(None);
    let mut padding;
    // Whether an escaped id or model (owned, not a place in the text) rules out a mark.
    let mut escaped = false;
    loop {
        if scan.peek()? != b'"' {
            return None;
        }
        let key_at = scan.at;
        let Cow::Borrowed(key) = scan.string()? else { return None };
        scan.expect(b':')?;
        padding = None;
        match key {
            "id" => {
                first(&mut seen, 1)?;
                chunk.id = scan.optional_string()?;
                escaped |= matches!(chunk.id, Some(Cow::Owned(_)));
            }
            "model" => {
                first(&mut seen, 2)?;
                chunk.model = scan.optional_string()?;
                escaped |= matches!(chunk.model, Some(Cow::Owned(_)));
            }
            "choices" => {
                if resumed.is_none() && !escaped && seen & 4 == 0 {
                    mark = Some(Resume {
                        head: scan.bytes[..key_at].to_vec(),
                        seen,
                        id: range_of(scan, chunk.id.as_ref()),
                        model: range_of(scan, chunk.model.as_ref()),
                        shape: None,
                    });
                }
                first(&mut seen, 4)?;
                choices_at = Some(key_at);
                chunk.choices =
                    scan_choices(scan, "delta", |index, texts, finish_reason| Choice {
                        index,
                        delta: texts.map(|texts| Delta {
                            content: {
                                content_at.set(texts.content_at);
                                texts.content
                            },
                            refusal: texts.refusal,
                            reasoning_content: texts.reasoning_content,
                            reasoning: texts.reasoning,
                            tool_calls: None,
                            function_call: None,
                        }),
                        finish_reason,
                        logprobs: None,
                    })?;
            }
            "usage" => {
                first(&mut seen, 8)?;
                chunk.usage = WireUsage::read(scan)?;
            }
            // An error object is read by the decoder's slow path.
            "error" => {
                first(&mut seen, 16)?;
                scan.null()?;
            }
            _ => {
                scan.whitespace();
                let start = scan.at;
                scan.skip(1)?;
                if scan.bytes[start] == b'"' {
                    padding = Some(start);
                }
            }
        }
        match scan.peek()? {
            b',' => scan.at += 1,
            b'}' => {
                scan.at += 1;
                // A shape follows a head: this chunk's, or the one it was resumed after.
                let anchored = resumed.is_some() || mark.is_some();
                let shape = anchored
                    .then(|| shape_of(scan, &chunk, choices_at?, content_at.take()?, padding))
                    .flatten();
                return Some((chunk, mark, shape));
            }
            _ => return None,
        }
    }
}

/// The shape of a text delta alone (see [`Shape`]) read whole by `scan` (the cursor after its
/// closing brace), with `choices`' key at `choices_at`, its content's string at `content` and
/// the last member's value at `padding` when that was a string rein skips.
fn shape_of(
    scan: &Scan<'_>,
    chunk: &Chunk<'_>,
    choices_at: usize,
    content: Range<usize>,
    padding: Option<usize>,
) -> Option<Shape> {
    let [choice] = chunk.choices.as_deref()? else { return None };
    let delta = choice.delta.as_ref()?;
    let text_alone = delta.content.is_some()
        && delta.refusal.is_none()
        && delta.reasoning_content.is_none()
        && delta.reasoning.is_none()
        && delta.tool_calls.is_none()
        && delta.function_call.is_none();
    if !text_alone
        || choice.finish_reason.is_some()
        || choice.logprobs.is_some()
        || chunk.usage.is_some()
        || chunk.error.is_some()
    {
        return None;
    }
    let bytes = scan.bytes;
    // A padding is the string right before the closing brace that ends the text.
    let padding = padding
        .filter(|_| scan.at == bytes.len() && bytes.get(scan.at.wrapping_sub(2)) == Some(&b'"'));
    let after = match padding {
        Some(start) => bytes.get(content.end..=start)?,
        None => bytes.get(content.end..)?,
    };
    // An id or a model after the content, as a place in `after`; one with an escape (not a
    // place in the text) cannot be, nor before it is one the head cannot have held.
    let in_after = |text: Option<&Cow<'_, str>>| -> Option<Option<Range<usize>>> {
        match text {
            None => Some(None),
            Some(Cow::Owned(_)) => None,
            Some(Cow::Borrowed(text)) => {
                let start = (text.as_ptr() as usize).checked_sub(bytes.as_ptr() as usize)?;
                match start.checked_sub(content.end) {
                    Some(offset) => Some(Some(offset..offset + text.len())),
                    None => (start < choices_at).then_some(None),
                }
            }
        }
    };
    Some(Shape {
        before: bytes.get(choices_at..=content.start)?.to_vec(),
        after: after.to_vec(),
        padded: padding.is_some(),
        index: choice.index,
        id: in_after(chunk.id.as_ref())?,
        model: in_after(chunk.model.as_ref())?,
    })
}

/// Panics unless serde reads `data` as the same chunk: run on every chunk the direct reader
/// accepts in debug builds (the tests) and in the fuzz targets' builds.
#[cfg(any(debug_assertions, fuzzing, test))]
pub(super) fn check_against_serde(data: &str, fast: &Chunk<'_>) {
    let slow = serde_json::from_str::<Chunk>(data);
    assert!(
        slow.as_ref().is_ok_and(|slow| slow == fast),
        "the direct chunk reader read {fast:?} where serde read {slow:?}, from {data:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json_scan::tests::{edited, edits};

    const TEXT: &str = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1735689600,"model":"m","service_tier":"default","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":" order"},"logprobs":null,"finish_reason":null}],"usage":null}"#;

    const BASES: [&str; 3] = [
        TEXT,
        r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}"#,
        r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a\"b\\n","reasoning":null},"finish_reason":"stop"}]}"#,
    ];

    /// The reader's chunk, which must also be serde's.
    fn fast(data: &str) -> Option<Chunk<'_>> {
        let chunk = read(data, &mut None)?;
        check_against_serde(data, &chunk);
        Some(chunk)
    }

    fn serde_reads(data: &str) -> bool {
        serde_json::from_str::<Chunk>(data).is_ok()
    }

    #[test]
    fn the_chunks_a_stream_is_made_of_are_read_without_serde() {
        let chunk = fast(TEXT).expect("a text delta");
        assert_eq!(chunk.id.as_deref(), Some("chatcmpl-1"));
        assert!(matches!(chunk.id, Some(Cow::Borrowed(_))), "an id without escapes is borrowed");
        let choices = chunk.choices.expect("choices");
        assert_eq!(choices[0].delta.as_ref().unwrap().content.as_deref(), Some(" order"));
        for data in [
            // The first chunk: the role, an empty content, a null refusal.
            r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]}"#,
            // The last: a finish reason and an empty delta.
            r#"{"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            // The usage chunk (`include_usage`), with the detail objects rein ignores.
            r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"accepted_prediction_tokens":0}}}"#,
            // Azure's anonymous opening chunk.
            r#"{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":false,"detected":false}}}]}"#,
            // Reasoning from vLLM and from Ollama, OpenAI's obfuscation padding, whitespace.
            r#"{ "id" : "c" , "choices" : [ { "index" : 0 , "delta" : { "reasoning_content" : "hmm" } } ] }"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning":"hmm","tool_calls":null}}],"obfuscation":"a1b2"}"#,
            // Escapes in kept and in ignored strings; numbers of every shape in ignored fields.
            r#"{"id":"c\u0031","choices":[{"index":0,"delta":{"content":"a \"quote\"\n\ud83d\ude00"}}],"x":"\\\/\b\f\r\t","n":[-0,0.5,1e3,-2.5E-7,1E+2,true,false,null,{},[]]}"#,
        ] {
            assert!(fast(data).is_some(), "left to serde: {data}");
        }
        let largest = fast(r#"{"choices":[{"index":4294967295}]}"#).unwrap();
        assert_eq!(largest.choices.unwrap()[0].index, Some(u32::MAX));
        let escaped = fast(r#"{"id":"c\u0031"}"#).unwrap();
        assert_eq!(escaped.id.as_deref(), Some("c1"));
    }

    #[test]
    fn a_streams_next_chunk_is_taken_up_after_the_bytes_it_repeats() {
        let mut resume = None;
        let first = read(TEXT, &mut resume).expect("a text delta");
        check_against_serde(TEXT, &first);
        let head = resume.as_ref().expect("a resume point").head.clone();
        assert_eq!(head, TEXT.as_bytes()[..TEXT.find(r#""choices""#).unwrap()]);
        // The next chunk repeats the head: read from the key `choices` on, with the id and the
        // model it found there, borrowed from the new chunk.
        let next = TEXT.replace(" order", "ed");
        let chunk = read(&next, &mut resume).expect("the next delta");
        check_against_serde(&next, &chunk);
        assert!(matches!(chunk.id, Some(Cow::Borrowed(id)) if id == "chatcmpl-1"));
        assert_eq!(resume.as_ref().unwrap().head, head);
        // The fields the head held count as read: one of them again after it is refused, as
        // serde refuses a duplicate field.
        for again in [r#""id":"x","#, r#""model":null,"#] {
            let twice = TEXT.replace(r#""usage":null"#, &format!(r#"{again}"usage":null"#));
            assert!(!serde_reads(&twice), "{twice}");
            assert!(read(&twice, &mut resume).is_none(), "{twice}");
        }
        // Without the stored head's bytes in front, the whole chunk is read and the point moves:
        // a changed model is the new chunk's, not the one the point held.
        let other = TEXT.replace(r#""model":"m""#, r#""model":"n""#);
        let chunk = read(&other, &mut resume).expect("another model's delta");
        check_against_serde(&other, &chunk);
        assert_eq!(chunk.model.as_deref(), Some("n"));
        assert_ne!(resume.as_ref().unwrap().head, head);
        // An escaped id is not a place in the text: no point is kept from that chunk.
        let mut fresh = None;
        let escaped = r#"{"id":"c\u0031","choices":[]}"#;
        assert!(read(escaped, &mut fresh).is_some() && fresh.is_none());
    }

    /// `TEXT` as a server that sorts its keys writes it (the simulator): the id and the model
    /// after `choices`.
    const SORTED: &str = r#"{"choices":[{"delta":{"content":" order"},"finish_reason":null,"index":0,"logprobs":null}],"created":1735689600,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk","usage":null}"#;

    /// `TEXT` with `content` for its content's string (written raw: quotes and escapes as
    /// given) and, when `padding` is given, OpenAI's padding member last.
    fn delta(content: &str, padding: Option<&str>) -> String {
        delta_in(TEXT, content, padding)
    }

    fn delta_in(base: &str, content: &str, padding: Option<&str>) -> String {
        let text = base.replace(r#""content":" order""#, &format!(r#""content":"{content}""#));
        match padding {
            Some(padding) => text.replace(
                r#""usage":null}"#,
                &format!(r#""usage":null,"obfuscation":"{padding}"}}"#),
            ),
            None => text,
        }
    }

    #[test]
    fn a_streams_text_deltas_are_read_from_the_last_ones_shape() {
        for (base, padding) in [
            (TEXT, None),
            (TEXT, Some("aB3x")),
            (TEXT, Some("")),
            (SORTED, None),
            (SORTED, Some("p")),
        ] {
            let delta = |content: &str, padding: Option<&str>| delta_in(base, content, padding);
            let mut resume = None;
            let first = delta(" order", padding);
            read(&first, &mut resume).expect("a text delta");
            assert!(resume.as_ref().is_some_and(|r| r.shape.is_some()), "{first}");
            for (content, text) in [
                ("ed", "ed"),
                ("", ""),
                (r#"a \"quote\"\n\ud83d\ude00 é"#, "a \"quote\"\n\u{1f600} é"),
            ] {
                for padding in [padding, padding.map(|_| "Zz9"), padding.map(|_| r#"q\"r"#)] {
                    let next = delta(content, padding);
                    let chunk =
                        shaped(&next, resume.as_ref().unwrap()).expect("read from the shape");
                    check_against_serde(&next, &chunk);
                    let choices = chunk.choices.as_ref().unwrap();
                    assert_eq!(choices[0].delta.as_ref().unwrap().content.as_deref(), Some(text));
                    assert!(matches!(chunk.id, Some(Cow::Borrowed("chatcmpl-1"))));
                    assert_eq!(chunk.model.as_deref(), Some("m"));
                }
            }
            // A string serde refuses is refused from the shape too, and by the whole reader.
            for content in ["a\u{1}b", r#"\q"#, r#"\ud83d"#, r#"a"b"#] {
                let next = delta(content, padding);
                assert!(shaped(&next, resume.as_ref().unwrap()).is_none(), "{next}");
                assert!(read(&next, &mut resume.take()).is_none() && !serde_reads(&next), "{next}");
                read(&first, &mut resume);
            }
            // Any other byte around the content is another shape: read whole, as it is.
            for other in [
                first.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
                first.replace(r#""index":0"#, r#""index":1"#),
                first.replace(r#""usage":null"#, r#""usage":{"prompt_tokens":1}"#),
                first.replace(r#""content":" order""#, r#""content":" order","refusal":"no""#),
                format!("{} ", &first[..first.len() - 1]) + "}",
            ] {
                assert!(shaped(&other, resume.as_ref().unwrap()).is_none(), "{other}");
                let chunk = read(&other, &mut resume).expect("read whole");
                check_against_serde(&other, &chunk);
                read(&first, &mut resume);
            }
        }
        // A delta read whole after other bytes than the head (an escaped id keeps no point)
        // leaves the shape, which follows the head, as it was: here its model after `choices`
        // would be the head's model again, a duplicate field.
        let mut resume = None;
        let first = delta(" order", None);
        read(&first, &mut resume).unwrap();
        let tail = r#""choices":[{"index":0,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":null,"model":"m"}"#;
        let other = format!(r#"{{"id":"c\u0031",{tail}"#);
        fast(&other).expect("read whole");
        read(&other, &mut resume).unwrap();
        let twice = format!("{}{tail}", &first[..first.find(r#""choices""#).unwrap()]);
        assert!(!serde_reads(&twice));
        assert!(read(&twice, &mut resume).is_none(), "{twice}");
        // The padding, when there is one, must be a string and end the chunk.
        let mut resume = None;
        read(&delta(" order", Some("p")), &mut resume).unwrap();
        for next in [
            delta("x", None),
            delta("x", Some("p")).replace(r#""p"}"#, "1}"),
            delta("x", Some("p")).replace(r#""p"}"#, r#""p" }"#),
        ] {
            assert!(shaped(&next, resume.as_ref().unwrap()).is_none(), "{next}");
        }
        // What is not a text delta alone leaves no shape: the first chunk's role with its
        // refusal, a finish, the usage, two choices.
        for data in [
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"","refusal":"r"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}],"usage":{"prompt_tokens":1}}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning":"a"}}]}"#,
        ] {
            let mut resume = None;
            fast(data).expect("read");
            read(data, &mut resume).unwrap();
            assert!(resume.is_some_and(|r| r.shape.is_none()), "{data}");
        }
    }

    #[test]
    fn what_it_does_not_read_itself_is_left_to_serde() {
        // Each of these serde reads; the reader says `None` so that serde does.
        for data in [
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"function_call":{"name":"f"}}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"logprobs":{"content":[]}}]}"#,
            r#"{"error":{"message":"overloaded"}}"#,
            r#"{"i\u0064":"c"}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"a"}}],"nested":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}"#,
            r#"[null,null,[]]"#,
        ] {
            assert!(serde_reads(data), "serde reads {data}");
            assert!(read(data, &mut None).is_none(), "the reader should leave {data} to serde");
        }
    }

    #[test]
    fn what_serde_refuses_the_reader_refuses() {
        for data in [
            // A duplicate field, a raw control byte, a bad escape, a lone surrogate.
            r#"{"id":"a","id":"b"}"#,
            "{\"choices\":[{\"delta\":{\"content\":\"a\u{1}b\"}}]}",
            "{\"x\":\"a\u{1f}\"}",
            r#"{"x":"\q"}"#,
            r#"{"choices":[{"delta":{"content":"\ud83d"}}]}"#,
            r#"{"x":"\u12"}"#,
            // Numbers outside JSON's grammar, or outside a u32 where one is read.
            r#"{"x":01}"#,
            r#"{"x":1.}"#,
            r#"{"x":.5}"#,
            r#"{"x":1e}"#,
            r#"{"x":-}"#,
            r#"{"x":+1}"#,
            r#"{"choices":[{"index":4294967296}]}"#,
            r#"{"choices":[{"index":-1}]}"#,
            r#"{"choices":[{"index":1.0}]}"#,
            r#"{"choices":[{"index":"0"}]}"#,
            // Structure: trailing commas, a missing colon, a bare word, trailing bytes, an
            // unterminated string or object, a non-string key.
            r#"{"x":[1,]}"#,
            r#"{"x":1,}"#,
            r#"{"x" 1}"#,
            r#"{"x":nul}"#,
            r#"{"x":tru}"#,
            r#"{"x":1} x"#,
            r#"{"x":"a"#,
            r#"{"x":1"#,
            r#"{1:1}"#,
            r#"{"choices":{"index":0}}"#,
            r#"{"choices":[{"delta":"text"}]}"#,
            r#"{"usage":{"prompt_tokens":-1}}"#,
        ] {
            assert!(read(data, &mut None).is_none(), "the reader accepted {data}");
            assert!(!serde_reads(data), "serde reads {data}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]
        /// Any content and padding, written raw into a text delta after one of its shape: what
        /// the reader accepts (from the shape or whole), serde reads as the same chunk, and
        /// what serde refuses, the reader refuses.
        #[test]
        fn a_delta_read_from_its_shape_is_read_as_serde_reads_it(
            sorted in proptest::bool::ANY,
            content in r#"([a-z \\"/bfnrtu0-9A-F\x00-\x1f]|\\u[dD][89aAbBcCdDeEfF][0-9a-fA-F]{2}|é|😀){0,12}"#,
            padding in proptest::option::of(r#"([a-z \\"u0-9\x1f]){0,6}"#),
        ) {
            let base = if sorted { SORTED } else { TEXT };
            let mut resume = None;
            let first = delta_in(base, " order", padding.as_deref().map(|_| "p"));
            proptest::prop_assert!(read(&first, &mut resume).is_some());
            let next = delta_in(base, &content, padding.as_deref());
            match read(&next, &mut resume) {
                Some(chunk) => check_against_serde(&next, &chunk),
                None => proptest::prop_assert!(!serde_reads(&next), "serde reads {}", next),
            }
        }

        /// Bytes of JSON's grammar, and whole members, dropped, added or swapped in real chunks:
        /// what the reader accepts, serde reads as the same chunk.
        #[test]
        fn the_reader_and_serde_agree_on_any_edit_of_a_chunk(
            base in 0..3usize,
            edits in edits(&[
                "\"id\":\"x\",", "\"index\":7,", "\"usage\":null,", "\"choices\":[],",
                "\"content\":\"z\",", "\"finish_reason\":\"stop\",", "\"logprobs\":null,",
            ]),
        ) {
            let data = edited(BASES[base], &edits);
            // Read alone, and as the chunk after the unedited one, resumed where it was left
            // when the edit left the bytes before `choices` alone.
            if let Some(chunk) = read(&data, &mut None) {
                check_against_serde(&data, &chunk);
            }
            let mut resume = None;
            let before = BASES[base];
            let first = read(before, &mut resume);
            proptest::prop_assert!(first.is_some() && resume.is_some());
            if let Some(chunk) = read(&data, &mut resume) {
                check_against_serde(&data, &chunk);
            }
        }
    }
}
