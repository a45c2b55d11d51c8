//! The tool URL-template filler, with the template, the arguments and the context read from
//! the input: never a panic; a URL it fills from a template it accepted is a valid URL; and
//! where the template's authority holds no placeholder, no argument can change the host, the
//! port, how many path segments there are, or the shape of the query and fragment.
//!
//! The input is text: the template on the first line, then one argument a line, `name=value`
//! (the value as JSON when it parses, a string otherwise), and context values as
//! `@name=value`, so a tool's `url` from a config is a seed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use url::Url;

/// What no argument may change: host, port, path segment count, and where `?`, `&` and `#`
/// fall.
fn shape(url: &Url) -> (Option<String>, Option<u16>, Option<usize>, Option<usize>, bool) {
    (
        url.host_str().map(str::to_string),
        url.port_or_known_default(),
        url.path_segments().map(Iterator::count),
        url.query().map(|query| query.split('&').count()),
        url.fragment().is_some(),
    )
}

fuzz_target!(|input: &str| {
    let mut lines = input.split('\n');
    let template = lines.next().unwrap_or_default();
    let mut args = Map::new();
    let mut context = Vec::new();
    for line in lines {
        let Some((name, text)) = line.split_once('=') else {
            continue;
        };
        match name.strip_prefix('@') {
            Some(name) => context.push((name, text)),
            None => {
                let value = serde_json::from_str(text).unwrap_or_else(|_| Value::from(text));
                args.insert(name.to_string(), value);
            }
        }
    }
    let Ok(filled) = rein_tools::fill_url_template(template, &Value::Object(args), &context) else {
        return;
    };
    let Ok(url) = filled else {
        return;
    };
    let parsed = match Url::parse(&url) {
        Ok(parsed) => parsed,
        Err(error) => panic!("`{template}` filled to `{url}`, not a URL: {error}"),
    };
    // The authority starts after the scheme and any more slashes (and the tabs and line ends
    // URL parsers drop) and ends at the first `/`, `\`, `?` or `#`; a placeholder in it may
    // rightly change the host.
    let rest = template.split_once(':').map_or("", |(_, rest)| rest);
    let authority = rest.trim_start_matches(['/', '\\', '\t', '\n', '\r']);
    let authority_end = authority.find(['/', '\\', '?', '#']).unwrap_or(authority.len());
    if authority[..authority_end].contains('{') {
        return;
    }
    // The template as accepted: every placeholder filled with `x`.
    let mut names = Map::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        names.insert(after[..close].to_string(), Value::from("x"));
        rest = &after[close + 1..];
    }
    let sample = match rein_tools::fill_url_template(template, &Value::Object(names), &[]) {
        Ok(Ok(sample)) => sample,
        other => panic!("`{template}` was accepted but cannot be filled with `x`: {other:?}"),
    };
    let Ok(sample) = Url::parse(&sample) else {
        panic!("the template `{template}` was accepted but its sample `{sample}` is no URL");
    };
    assert_eq!(shape(&parsed), shape(&sample), "`{template}` filled to `{url}`");
});
