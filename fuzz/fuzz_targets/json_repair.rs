//! The answer repairs (code fence, trailing prose) on arbitrary text: never a panic, and when
//! the repairs claim JSON, the text they leave is that JSON (it parses, to the same value).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_core::validate::parse_with_repairs;
use serde_json::Value;

fuzz_target!(|text: &str| {
    let repaired = parse_with_repairs(text);
    if let Ok(value) = &repaired.json {
        let reparsed: Value = match serde_json::from_str(&repaired.text) {
            Ok(reparsed) => reparsed,
            Err(error) => panic!("repair claimed JSON but left {:?}: {error}", repaired.text),
        };
        assert_eq!(&reparsed, value, "the repaired text is not the JSON returned");
    } else {
        // Nothing the repairs can parse is JSON to begin with.
        assert!(serde_json::from_str::<Value>(text).is_err(), "valid JSON refused: {text:?}");
    }
});
