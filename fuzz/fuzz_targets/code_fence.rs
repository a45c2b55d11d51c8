//! Code-fence stripping from the other side: any JSON value, written compact or pretty inside
//! a ```` ```json ```` (or bare) fence with arbitrary text after the closing fence, must come
//! back as that value, with the fence (and the text after it) recorded as repaired. Text that
//! is not JSON, fenced the same way, must not panic.
//!
//! The input is text: the JSON, then optionally a `\u{1}` and the text to put after the
//! closing fence. Its lengths choose the fence's language tag, the padding around the block
//! and compact or pretty printing, so a plain JSON file is a seed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_core::validate::{CodeRepair, parse_answer, parse_with_repairs};
use serde_json::Value;

fuzz_target!(|input: &str| {
    let (json, after) = input.split_once('\u{1}').unwrap_or((input, ""));
    let language = ["json", "", "JSON", " json "][json.len() % 4];
    let pad = ["", "\n", "  \n", "\t"][after.len() % 4];
    let pretty = (json.len() / 4) % 2 == 1;
    let Ok(value) = serde_json::from_str::<Value>(json) else {
        // Not JSON: whatever shape it is, classifying it must not panic.
        let _ = parse_answer(&format!("{pad}```{language}\n{json}\n```{after}{pad}"));
        return;
    };
    let written = match pretty {
        true => serde_json::to_string_pretty(&value),
        false => serde_json::to_string(&value),
    };
    let Ok(written) = written else {
        return;
    };
    // The value as this text reads back (float text can read back one unit off).
    let Ok(expected) = serde_json::from_str::<Value>(&written) else {
        return;
    };
    let text = format!("{pad}```{language}\n{written}\n```{after}{pad}");
    let repaired = parse_with_repairs(&text);
    assert_eq!(repaired.json.as_ref().ok(), Some(&expected), "fenced JSON lost: {text:?}");
    assert_eq!(repaired.text, written, "{text:?}");
    assert_eq!(repaired.repairs.first(), Some(&CodeRepair::StrippedCodeFence), "{text:?}");
    let after = after.trim();
    let dropped = repaired.repairs.get(1);
    match after.is_empty() {
        true => assert_eq!(dropped, None, "{text:?}"),
        false => assert_eq!(
            dropped,
            Some(&CodeRepair::DroppedTrailingProse { dropped: after.to_string() }),
            "{text:?}"
        ),
    }
    assert_eq!(repaired.repairs.len(), 1 + usize::from(!after.is_empty()), "{text:?}");
});
