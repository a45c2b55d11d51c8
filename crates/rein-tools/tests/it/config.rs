//! Config: the documented example parses and builds a dispatcher; every rule that keeps a
//! ladder honest is enforced with an error that names the key.

use std::sync::Arc;

use rein_tools::Dispatcher;
use rein_tools::config::ToolKind;

use crate::support::{TestStore, http_client, parse_tools};

const EXAMPLE: &str = include_str!("../../tools.example.toml");

fn env(name: &str) -> Option<String> {
    matches!(name, "SEARCH_TOKEN" | "PAYMENTS_TOKEN").then(|| "Bearer t0ken".to_string())
}

#[test]
fn the_documented_example_parses_and_builds_a_dispatcher() {
    let config = parse_tools(EXAMPLE).unwrap_or_else(|e| panic!("{e}"));
    let plan = Arc::new(config.compile(&env).unwrap());
    let dispatcher = Dispatcher::from_plan(plan, Arc::new(TestStore::new()), http_client());
    assert_eq!(
        dispatcher.tools(),
        [
            ("create_refund".to_string(), ToolKind::Write),
            ("hand_off".to_string(), ToolKind::Write),
            ("search_docs".to_string(), ToolKind::Read),
        ]
    );
    let rendered = format!("{dispatcher:?}");
    assert!(!rendered.contains("t0ken"), "a secret header leaked into Debug");
}

#[test]
fn an_unset_secret_is_named_by_key_without_its_value() {
    let config = parse_tools(EXAMPLE).unwrap();
    let error = config.compile(&|name| (name == "SEARCH_TOKEN").then(|| "x".into())).unwrap_err();
    assert!(error.names("tools.create_refund.rungs[0].headers_env.authorization"), "{error}");
    assert_eq!(error.problems.len(), 1, "{error}");
    assert!(error.to_string().contains("environment variable `PAYMENTS_TOKEN` is not set"));
}

const READ: &str = r#"
[tools.t]
kind = "read"
[[tools.t.rungs]]
kind = "http"
source = "primary"
url = "http://127.0.0.1:1/x/{q}"
timeout_ms = 100
"#;

const WRITE: &str = r#"
[tools.w]
kind = "write"
[[tools.w.rungs]]
kind = "http"
source = "primary"
url = "http://127.0.0.1:1/w"
timeout_ms = 100
"#;

#[test]
fn validation_errors_name_the_key() {
    let cases: &[(&str, String, &str)] = &[
        (
            "a cache rung needs its staleness budget",
            format!("{READ}[[tools.t.rungs]]\nkind = \"cache\"\nsource = \"c\"\n"),
            "tools.t.rungs[1].max_age_ms",
        ),
        (
            "writes never substitute from a cache",
            format!("{WRITE}[[tools.w.rungs]]\nkind = \"cache\"\nsource = \"c\"\nmax_age_ms = 5\n"),
            "tools.w.rungs[1].kind",
        ),
        (
            "writes never substitute a canned answer",
            format!("{WRITE}[[tools.w.rungs]]\nkind = \"static\"\nsource = \"s\"\nresult = {{}}\n"),
            "tools.w.rungs[1].kind",
        ),
        (
            "reads never queue",
            format!("{READ}[[tools.t.rungs]]\nkind = \"queue\"\nsource = \"q\"\n"),
            "tools.t.rungs[1].kind",
        ),
        (
            "a queue rung comes after the primary",
            "[tools.w]\nkind = \"write\"\n[[tools.w.rungs]]\nkind = \"queue\"\nsource = \"q\"\n".into(),
            "tools.w.rungs[0].kind",
        ),
        (
            "a queue rung is last",
            format!(
                "{WRITE}[[tools.w.rungs]]\nkind = \"queue\"\nsource = \"q\"\n[[tools.w.rungs]]\nkind = \"http\"\nsource = \"p2\"\nurl = \"http://x/\"\ntimeout_ms = 5\n"
            ),
            "tools.w.rungs[1].kind",
        ),
        ("a tool needs a rung", "[tools.t]\nkind = \"read\"\n".into(), "tools.t.rungs"),
        (
            "unknown bulkhead",
            READ.replace("timeout_ms = 100", "timeout_ms = 100\nbulkhead = \"nope\""),
            "tools.t.rungs[0].bulkhead",
        ),
        (
            "bad URL template",
            READ.replace("/x/{q}", "/x/{q"),
            "tools.t.rungs[0].url",
        ),
        (
            "gate operators",
            WRITE.replace(
                "kind = \"write\"",
                "kind = \"write\"\ngate = [{ field = \"amount\", op = \"=>\", value = 5, reason = \"r\" }]",
            ),
            "tools.w.gate[0].op",
        ),
        (
            "an ordering gate needs a number",
            WRITE.replace(
                "kind = \"write\"",
                "kind = \"write\"\ngate = [{ field = \"amount\", op = \">\", value = \"50\", reason = \"r\" }]",
            ),
            "tools.w.gate[0].value",
        ),
        (
            "an http rung sizes its own budget",
            READ.replace("timeout_ms = 100\n", ""),
            "tools.t.rungs[0].timeout_ms",
        ),
        (
            "an empty partition",
            format!("[bulkheads.search]\nmax_concurrent = 0\n{READ}"),
            "bulkheads.search.max_concurrent",
        ),
        (
            "wording placeholders are checked",
            format!("{READ}[tools.t.detail]\nstale = \"from {{when}}\"\n"),
            "tools.t.detail.stale",
        ),
        (
            "an unknown placeholder in a next step",
            format!("{READ}[tools.t.detail]\nrejected_args = \"No order {{arg.q}}. {{nope}}\"\n"),
            "tools.t.detail.rejected_args",
        ),
        (
            "an argument placeholder names a top-level argument",
            format!("{READ}[tools.t.detail]\nrejected_args = \"No order {{arg.order.id}}\"\n"),
            "tools.t.detail.rejected_args",
        ),
        (
            "an argument placeholder needs a name",
            format!("{READ}[tools.t.detail]\nrefused = \"No order {{arg.}}\"\n"),
            "tools.t.detail.refused",
        ),
        (
            "fields of another kind",
            READ.replace("timeout_ms = 100", "timeout_ms = 100\nmax_age_ms = 5"),
            "tools.t.rungs[0].max_age_ms",
        ),
        (
            "sources are unique within a tool",
            format!("{READ}[[tools.t.rungs]]\nkind = \"static\"\nsource = \"primary\"\nresult = 1\n"),
            "tools.t.rungs[1].source",
        ),
        (
            "reads carry no key",
            READ.replace("kind = \"read\"", "kind = \"read\"\nkey_from = \"conversation\""),
            "tools.t.key_from",
        ),
        (
            "unknown fidelity",
            READ.replace("timeout_ms = 100", "timeout_ms = 100\nfidelity = \"old\""),
            "tools.t.rungs[0].fidelity",
        ),
        (
            "unknown keys are refused",
            READ.replace("timeout_ms = 100", "timeout_ms = 100\ntimeout = 5"),
            "tools.t.rungs[0].timeout",
        ),
        (
            "the breaker opens after at least one failure",
            READ.replace("timeout_ms = 100", "timeout_ms = 100\nbreaker = { failures = 0, cooldown_ms = 5 }"),
            "tools.t.rungs[0].breaker.failures",
        ),
        (
            "reads declare no duplicate guard",
            READ.replace("kind = \"read\"", "kind = \"read\"\nidempotency = \"key\""),
            "tools.t.idempotency",
        ),
        (
            "an unknown duplicate guard",
            WRITE.replace("kind = \"write\"", "kind = \"write\"\nidempotency = \"maybe\""),
            "tools.w.idempotency",
        ),
        (
            "a lookup tool needs its lookup",
            WRITE.replace("kind = \"write\"", "kind = \"write\"\nidempotency = \"lookup\""),
            "tools.w.lookup",
        ),
        (
            "a lookup only runs for lookup tools",
            format!("{WRITE}[tools.w.lookup]\nurl = \"http://x/find/{{idempotency_key}}\"\ntimeout_ms = 5\n"),
            "tools.w.lookup",
        ),
        (
            "a lookup sizes its own budget",
            format!(
                "{}[tools.w.lookup]\nurl = \"http://x/find/{{idempotency_key}}\"\n",
                WRITE.replace("kind = \"write\"", "kind = \"write\"\nidempotency = \"lookup\"")
            ),
            "tools.w.lookup.timeout_ms",
        ),
        (
            "a lookup's found_at is a JSON Pointer",
            format!(
                "{}[tools.w.lookup]\nurl = \"http://x/f\"\ntimeout_ms = 5\nfound_at = \"tickets\"\n",
                WRITE.replace("kind = \"write\"", "kind = \"write\"\nidempotency = \"lookup\"")
            ),
            "tools.w.lookup.found_at",
        ),
        (
            "a body cap admits something",
            READ.replace("timeout_ms = 100", "timeout_ms = 100\nmax_response_bytes = 0"),
            "tools.t.rungs[0].max_response_bytes",
        ),
        (
            "only http rungs read a body",
            format!(
                "{READ}[[tools.t.rungs]]\nkind = \"cache\"\nsource = \"c\"\nmax_age_ms = 5\nmax_response_bytes = 10\n"
            ),
            "tools.t.rungs[1].max_response_bytes",
        ),
        (
            "backoff cap below its base",
            format!("[outbox]\nbackoff_base_ms = 5000\nbackoff_cap_ms = 1000\n{READ}"),
            "outbox.backoff_cap_ms",
        ),
    ];
    for (what, toml, key) in cases {
        let error = match parse_tools(toml) {
            Ok(_) => panic!("{what}: accepted\n{toml}"),
            Err(error) => error,
        };
        let keys: Vec<&str> = error.problems.iter().map(|p| p.key.as_str()).collect();
        assert!(keys.contains(key), "{what}: expected a problem at `{key}`, got {error}");
    }
}

#[test]
fn argument_placeholders_are_accepted_in_every_situation() {
    let toml = format!(
        "{READ}[tools.t.detail]\nrejected_args = \"No order {{arg.order_id}}. Ask the customer to check the number.\"\nrefused = \"{{tool}} is down; {{arg.x}} and {{arg.Order-ID_2}} stay unknown\"\n"
    );
    parse_tools(&toml).unwrap_or_else(|e| panic!("{e}"));

    let toml =
        format!("{READ}[tools.t.detail]\nrejected_args = \"No order {{arg.q}}. {{nope}}\"\n");
    let error = parse_tools(&toml).unwrap_err();
    assert_eq!(error.problems.len(), 1, "{error}");
    let message = error.to_string();
    assert!(message.contains("`tools.t.detail.rejected_args`"), "{message}");
    assert!(message.contains("`{nope}` is not a placeholder"), "{message}");
    assert!(message.contains("{arg.NAME}"), "the message says how to name an argument: {message}");
}

#[test]
fn error_messages_say_the_fix() {
    let toml =
        format!("{WRITE}[[tools.w.rungs]]\nkind = \"cache\"\nsource = \"c\"\nmax_age_ms = 5\n");
    let error = parse_tools(&toml).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the config has 1 problem:\n  - `tools.w.rungs[1].kind`: a write tool cannot have a `cache` rung: writes never substitute; defer with a final `queue` rung instead\n"
    );
}
