//! A direct reader for the Chat Completions chunk every OpenAI-compatible stream is made of: a
//! content, refusal or reasoning delta, or a finish reason, around the fields rein ignores. It
//! fills the same [`Chunk`] serde would in one pass over the bytes (from a stream's second
//! chunk on, from where the bytes its chunks repeat end: [`Resume`]), and says `None` (the
//! caller then asks serde_json) for anything outside what it reads exactly: tool-call
//! fragments, log probabilities, an error object, a key spelled with an escape, a duplicate
//! field, a string serde would refuse, numbers past `u32`, nesting past 64. What it accepts it
//! reads as serde does: debug builds and the fuzz targets check every chunk it reads against
//! serde's reading.
//!
//! Why not serde: decoding the upstream's chunks was 46 % of the instructions of a checked call
//! over an SSE upstream, 6,400 a 290-byte chunk in serde_json (its visitors' per-token work for
//! fourteen keys and their values); this reads one in about 2,200.

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
}

/// The chunk in `data` (already trimmed), or `None` when serde_json must read it. `resume` is
/// the stream's: read from and kept up to date.
pub(super) fn read<'a>(data: &'a str, resume: &mut Option<Resume>) -> Option<Chunk<'a>> {
    let mut scan = Scan { text: data, bytes: data.as_bytes(), at: 0, finite_numbers: false };
    let (chunk, mark) = chunk(&mut scan, resume.as_ref())?;
    scan.whitespace();
    if scan.at != scan.bytes.len() {
        return None;
    }
    if let Some(mark) = mark {
        *resume = Some(mark);
    }
    Some(chunk)
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

/// The chunk, and the point to resume the stream's next chunk at when this one has a key
/// `choices` and nothing escaped before it.
fn chunk<'a>(scan: &mut Scan<'a>, resume: Option<&Resume>) -> Option<(Chunk<'a>, Option<Resume>)> {
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
                return Some((chunk, None));
            }
        }
    }
    let mut mark = None;
    // Whether an escaped id or model (owned, not a place in the text) rules out a mark.
    let mut escaped = false;
    loop {
        if scan.peek()? != b'"' {
            return None;
        }
        let key_at = scan.at;
        let Cow::Borrowed(key) = scan.string()? else { return None };
        scan.expect(b':')?;
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
                    });
                }
                first(&mut seen, 4)?;
                chunk.choices =
                    scan_choices(scan, "delta", |index, texts, finish_reason| Choice {
                        index,
                        delta: texts.map(|texts| Delta {
                            content: texts.content,
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
            _ => scan.skip(1)?,
        }
        match scan.peek()? {
            b',' => scan.at += 1,
            b'}' => {
                scan.at += 1;
                return Some((chunk, mark));
            }
            _ => return None,
        }
    }
}

/// Panics unless serde reads `data` as the same chunk: run on every chunk the direct reader
/// accepts in debug builds (the tests) and in the fuzz targets' builds.
#[cfg(any(debug_assertions, fuzzing))]
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
