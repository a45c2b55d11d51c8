//! Config snippets rein writes for an operator to paste into `rein.toml`: a route's coverage
//! check with the cutoff a sweep chose (`rein eval --sweep coverage --snippet FILE`), as the
//! whole `[routes.<name>.coverage]` table, so it replaces the route's `coverage` setting with
//! nothing else changed. Written with the same TOML crate and key names the loader reads.

use std::collections::BTreeMap;

use rein_core::coverage::CoverageCheck;
use serde::Serialize;

#[derive(Serialize)]
struct Routes<'a> {
    routes: BTreeMap<&'a str, Route<'a>>,
}

#[derive(Serialize)]
struct Route<'a> {
    coverage: &'a CoverageCheck,
}

/// `check` as the `[routes.<route>.coverage]` table of a `rein.toml`.
pub fn coverage(route: &str, check: &CoverageCheck) -> Result<String, String> {
    let snippet = Routes { routes: BTreeMap::from([(route, Route { coverage: check })]) };
    toml::to_string(&snippet).map_err(|error| format!("cannot write the snippet: {error}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::config::Config;
    use rein_core::coverage::{Ambiguity, Decline};

    const BASE: &str = r#"
[providers.openai]
kind = "openai"
api_key_env = "OPENAI_API_KEY"

[routes.coverage]
[[routes.coverage.tiers]]
name = "small"
provider = "openai"
model = "gpt-4o-mini"

[routes."support.eu"]
handoff_reply = { template = "A person will reply." }
[[routes."support.eu".tiers]]
name = "primary"
provider = "openai"
model = "gpt-4o"
"#;

    #[test]
    fn the_snippet_is_read_back_by_the_config_loader() {
        let check = CoverageCheck {
            route: "coverage".into(),
            cutoff: 0.8,
            samples: 3,
            decline: Decline::Clarify,
            ambiguous: vec![Ambiguity {
                contains: vec!["change my \"order\"".into()],
                ask: "The address or the date?".into(),
            }],
        };
        let snippet = coverage("support.eu", &check).unwrap();
        assert!(snippet.contains("[routes.\"support.eu\".coverage]"), "{snippet}");
        assert!(snippet.contains("cutoff = 0.8\n"), "{snippet}");
        let text = format!("{BASE}\n{snippet}");
        let config = Config::from_toml(&text, &|_| Some("sk-test".to_string())).unwrap();
        let read = config.routes["support.eu"].escalation.coverage.clone().unwrap();
        assert_eq!(read, check);
    }
}
