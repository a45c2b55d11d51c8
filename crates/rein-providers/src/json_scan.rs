//! A one-pass reader of JSON for the few shapes rein reads on every streamed event, where
//! serde_json's visitors (or its `Value` trees) cost several times the bytes' own scanning. It
//! reads what it is asked for and steps over the rest, checking the grammar as serde_json does,
//! and says `None` for anything it does not read exactly (the caller then asks serde_json,
//! whose reading it must match: each user checks that in debug builds and the fuzz targets).

use std::borrow::Cow;

use rein_core::json_write::string_stops;

/// Deeper than this, an ignored value is left to serde (whose own limit is 128).
const MAX_DEPTH: u32 = 64;

pub(crate) struct Scan<'a> {
    pub(crate) text: &'a str,
    pub(crate) bytes: &'a [u8],
    pub(crate) at: usize,
    /// Read numbers as serde_json reads them into a `Value` (an `f64` must hold them), not as
    /// it steps over an ignored one (any number of JSON's grammar).
    pub(crate) finite_numbers: bool,
}

/// Marks `bit` seen, or `None` when it already was: serde refuses a struct's field twice.
pub(crate) fn first(seen: &mut u8, bit: u8) -> Option<()> {
    if *seen & bit != 0 {
        return None;
    }
    *seen |= bit;
    Some(())
}

impl<'a> Scan<'a> {
    pub(crate) fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    /// The next byte after whitespace, not consumed.
    pub(crate) fn peek(&mut self) -> Option<u8> {
        self.whitespace();
        self.bytes.get(self.at).copied()
    }

    pub(crate) fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    pub(crate) fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// An object's members: `member` is called with each key (the cursor after its colon) and
    /// must read the value.
    pub(crate) fn object(
        &mut self,
        mut member: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.expect(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            // A key with an escape is left to serde, which unescapes it before matching it.
            let Cow::Borrowed(key) = self.string()? else { return None };
            self.expect(b':')?;
            member(self, key)?;
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// An array's items: `item` is called with the cursor on each and must read it.
    pub(crate) fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A string (the cursor on its opening quote): borrowed when it has no escape, unescaped by
    /// serde_json when it has one. `None` for a raw control byte, which serde refuses.
    pub(crate) fn string(&mut self) -> Option<Cow<'a, str>> {
        let start = self.at + 1;
        let mut end = start;
        // Eight bytes at a time while they last, then byte by byte.
        while let Some(word) = self.bytes.get(end..end + 8) {
            let mut eight = [0; 8];
            eight.copy_from_slice(word);
            let stops = string_stops(u64::from_le_bytes(eight));
            if stops != 0 {
                end += (stops.trailing_zeros() / 8) as usize;
                break;
            }
            end += 8;
        }
        loop {
            match *self.bytes.get(end)? {
                b'"' => break,
                b'\\' => return self.escaped_string(start, end),
                0..0x20 => return None,
                _ => end += 1,
            }
        }
        self.at = end + 1;
        // Both ends are next to an ASCII quote, so on character boundaries.
        self.text.get(start..end).map(Cow::Borrowed)
    }

    /// The rest of a string with an escape at `end`: exactly serde's unescaping, and its
    /// refusals (a bad escape, a lone surrogate, a control byte).
    #[cold]
    fn escaped_string(&mut self, start: usize, mut end: usize) -> Option<Cow<'a, str>> {
        loop {
            // Skip the escaped byte: a `"` or `\` after a backslash does not end the string,
            // and none of a `\u` escape's four hex digits is either.
            end += 2;
            end += memchr::memchr2(b'"', b'\\', self.bytes.get(end..)?)?;
            if self.bytes[end] == b'"' {
                break;
            }
        }
        self.at = end + 1;
        serde_json::from_str::<String>(self.text.get(start - 1..=end)?).ok().map(Cow::Owned)
    }

    /// `null` as `None`, a string as `Some`; outer `None` for anything else.
    pub(crate) fn optional_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b'"' => self.string().map(Some),
            _ => None,
        }
    }

    pub(crate) fn optional_owned(&mut self) -> Option<Option<String>> {
        self.optional_string().map(|text| text.map(Cow::into_owned))
    }

    /// `null`, or a non-negative integer that fits a `u32`, written without a fraction, an
    /// exponent or a sign (anything else is left to serde).
    pub(crate) fn optional_u32(&mut self) -> Option<Option<u32>> {
        match self.peek()? {
            b'n' => self.literal(b"null").map(|()| None),
            b'0' => {
                self.at += 1;
                // `0` must end the number: serde refuses a leading zero and reads `0.0` as a
                // float, not a `u32`; the caller's delimiter check refuses what follows.
                Some(Some(0))
            }
            b'1'..=b'9' => {
                let mut value: u32 = 0;
                while let Some(&digit @ b'0'..=b'9') = self.bytes.get(self.at) {
                    value = value.checked_mul(10)?.checked_add(u32::from(digit - b'0'))?;
                    self.at += 1;
                }
                Some(Some(value))
            }
            _ => None,
        }
    }

    /// `null` only: a field rein reads only through serde when it is present.
    pub(crate) fn null(&mut self) -> Option<()> {
        (self.peek()? == b'n').then_some(())?;
        self.literal(b"null")
    }

    /// Steps over any JSON value, checking its grammar as serde does when it ignores one.
    pub(crate) fn skip(&mut self, depth: u32) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            // What serde refuses when it ignores a string it also refuses when it reads one
            // (which refuses a lone surrogate besides): reading it is strict enough.
            b'"' => self.string().map(drop),
            b'{' => self.object(|scan, _| scan.skip(depth + 1)),
            b'[' => self.array(|scan| scan.skip(depth + 1)),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    /// JSON's number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
    fn number(&mut self) -> Option<()> {
        let start = self.at;
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.at_least_one_digit()?;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            if self.finite_numbers {
                // An exponent can take it past an `f64`, which a `Value` refuses.
                return None;
            }
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.at_least_one_digit()?;
        }
        // Past 30 digits an integer may not fit an `f64` either; left to serde.
        (!self.finite_numbers || self.at - start <= 30).then_some(())
    }

    fn digits(&mut self) {
        while let Some(b'0'..=b'9') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn at_least_one_digit(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use proptest::prelude::Strategy;

    /// One edit: where, which kind (insert, drop, overwrite, insert where a member may start) and
    /// what text.
    pub(crate) type Edit = (usize, u8, &'static str);

    /// One to three edits of bytes of JSON's grammar, or of the whole `members` given.
    pub(crate) fn edits(members: &[&'static str]) -> impl Strategy<Value = Vec<Edit>> {
        let mut texts = vec![
            "\"",
            "\\",
            ",",
            ":",
            "{",
            "}",
            "[",
            "]",
            "0",
            "-",
            ".",
            "e",
            "1",
            " ",
            "n",
            "null",
            "\\u",
            "\\ud83d",
            "\u{1}",
            "é",
            "\"x\":[{}],",
            "\"x\":1e999,",
        ];
        texts.extend_from_slice(members);
        proptest::collection::vec((0..400usize, 0..4u8, proptest::sample::select(texts)), 1..4)
    }

    /// `base` with `edits` made.
    pub(crate) fn edited(base: &str, edits: &[Edit]) -> String {
        let mut data = base.to_owned();
        for &(at, kind, text) in edits {
            let mut at = at.min(data.len());
            while !data.is_char_boundary(at) {
                at -= 1;
            }
            let end = (at + text.len()).min(data.len());
            match kind {
                0 => data.insert_str(at, text),
                1 if data.is_char_boundary(end) => data.replace_range(at..end, ""),
                2 if data.is_char_boundary(end) => data.replace_range(at..end, text),
                1 | 2 => {}
                // After an object's opening or a comma, where a member may start.
                _ => {
                    let openings: Vec<usize> =
                        data.match_indices(['{', ',']).map(|(i, _)| i + 1).collect();
                    if !openings.is_empty() {
                        data.insert_str(openings[at % openings.len()], text);
                    }
                }
            }
        }
        data
    }
}
