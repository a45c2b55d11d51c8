//! The gateway's Messages request parser on arbitrary bytes: it must never panic, and
//! its one-pass path must agree with the JSON-tree path it stands in for (same request, or
//! same error).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_gateway::wire::anthropic::{parse_request, parse_request_tree};

fuzz_target!(|data: &[u8]| {
    let parsed = parse_request(data);
    assert_eq!(parsed, parse_request_tree(data), "the one-pass and tree paths disagree");
});
