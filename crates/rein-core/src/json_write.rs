//! Writing JSON strings and numbers directly into a byte buffer, for the bodies rein renders on
//! every call: the same bytes `serde_json` writes (a string's `"`, `\` and control bytes
//! escaped, `\b \f \n \r \t` by their short forms and the others as `\u00XX`, everything else as
//! it is), found eight bytes at a time instead of one, without a serializer around them. Here,
//! beside the engine's types, so the providers' encoders, the gateway's renderers and the
//! store's records all write with it.

/// The high bit of each byte of `word` that is a quote, a backslash or a control byte; exact
/// for the lowest such byte (the borrow of the subtraction can only mark bytes above it).
pub fn string_stops(word: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    zero_bytes(word ^ (ONES * u64::from(b'"')))
        | zero_bytes(word ^ (ONES * u64::from(b'\\')))
        | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS)
}

/// `text` as a JSON string, quotes included, onto `out`.
pub fn push_str(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    let mut at = 0;
    while at < bytes.len() {
        // Eight bytes at a time while they last (the lowest stop a word shows is a byte to
        // escape), then byte by byte.
        if let Some(word) = bytes.get(at..at + 8) {
            let mut eight = [0; 8];
            eight.copy_from_slice(word);
            let stops = string_stops(u64::from_le_bytes(eight));
            if stops == 0 {
                at += 8;
                continue;
            }
            at += (stops.trailing_zeros() / 8) as usize;
        } else if !matches!(bytes[at], b'"' | b'\\' | 0..0x20) {
            at += 1;
            continue;
        }
        out.extend_from_slice(&bytes[start..at]);
        push_escape(out, bytes[at]);
        at += 1;
        start = at;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The escape of a byte that needs one, as serde_json writes it.
#[cold]
fn push_escape(out: &mut Vec<u8>, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        _ => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(byte >> 4)],
            HEX[usize::from(byte & 0xf)],
        ]),
    }
}

/// An unsigned integer in decimal onto `out`.
pub fn push_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A signed integer in decimal onto `out`.
pub fn push_i64(out: &mut Vec<u8>, n: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `text` as a JSON string, or `null`.
pub fn push_opt_str(out: &mut Vec<u8>, text: Option<&str>) {
    match text {
        Some(text) => push_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn written(text: &str) -> String {
        let mut out = Vec::new();
        push_str(&mut out, text);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let cases = [
            "",
            "plain",
            "Your order shipped yesterday and should arrive on Thursday.",
            "\"",
            "\\",
            "a\"b\\c",
            "\u{0}\u{1}\u{7}\u{8}\u{9}\u{a}\u{b}\u{c}\u{d}\u{1f}\u{7f}",
            "seven b\n",
            "eight by\n",
            "nine byte\n",
            "0123456789abcdef\"0123456789abcdef\"",
            "ünïcödé ✓ 😀 and \u{2028} stay as they are",
            "/ is not escaped, </script> neither",
            "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n",
        ];
        for text in cases {
            assert_eq!(written(text), serde_json::to_string(text).unwrap(), "{text:?}");
        }
    }

    #[test]
    fn numbers_are_written_as_serde_json_writes_them() {
        for n in [0u64, 7, 10, 1_735_689_600, u64::MAX] {
            let mut out = Vec::new();
            push_u64(&mut out, n);
            assert_eq!(out, serde_json::to_vec(&n).unwrap());
        }
        for n in [0i64, -1, 7, i64::MIN, i64::MAX] {
            let mut out = Vec::new();
            push_i64(&mut out, n);
            assert_eq!(out, serde_json::to_vec(&n).unwrap());
        }
        let mut out = Vec::new();
        push_opt_str(&mut out, None);
        push_opt_str(&mut out, Some("x"));
        assert_eq!(out, b"null\"x\"");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        /// Any text, and text dense in what needs escaping at every offset of the 8-byte steps.
        #[test]
        fn any_string_is_written_as_serde_json_writes_it(
            text in any::<String>(),
            dense in proptest::collection::vec(
                prop_oneof![
                    Just('"'), Just('\\'), Just('\n'), Just('\u{1}'), Just('\u{1f}'),
                    Just('a'), Just('é'), Just('😀'), Just('\u{7f}'),
                ],
                0..40,
            ),
        ) {
            prop_assert_eq!(written(&text), serde_json::to_string(&text).unwrap());
            let dense: String = dense.into_iter().collect();
            prop_assert_eq!(written(&dense), serde_json::to_string(&dense).unwrap());
        }
    }
}
