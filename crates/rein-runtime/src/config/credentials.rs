//! What `rein check` says about each provider's credentials: for every secret or setting a
//! provider signs or authenticates with, where it is read from (the variable the config names,
//! the AWS shared credentials file's profile), whether it is there, and what is missing. It
//! reads the same places, in the same order, as the config loader does, and never shows a
//! value: only names of variables, files and profiles.

use std::fmt;

use super::EnvLookup;
use super::raw::{ProviderKind, RawConfig, RawProvider};

/// One provider's credentials, as `rein check` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCredentials {
    pub provider: String,
    pub kind: ProviderKind,
    pub items: Vec<CredentialItem>,
}

impl ProviderCredentials {
    /// Whether every credential the provider needs was found.
    pub fn complete(&self) -> bool {
        self.items.iter().all(|item| item.state != CredentialState::Missing)
    }
}

/// One credential (or credential-like setting, such as the AWS region) of a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialItem {
    /// What it is: `API key`, `access key id`, `region`, ...
    pub what: &'static str,
    /// Where it is read from, in words (never the value).
    pub source: String,
    pub state: CredentialState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialState {
    /// Found where the source says.
    Found,
    /// Needed and not found: `rein serve` refuses to start.
    Missing,
    /// Optional and absent (a session token with long-term keys, a local server's key).
    Absent,
    /// Only the place it will be asked can be named: Google's metadata server answers on Google
    /// Cloud alone, and only when a call asks.
    Unchecked,
}

/// The credentials of every provider of a config file, in the order of their names.
pub fn explain(raw: &RawConfig, env: EnvLookup<'_>) -> Vec<ProviderCredentials> {
    raw.providers
        .iter()
        .map(|(name, provider)| ProviderCredentials {
            provider: name.clone(),
            kind: provider.kind,
            items: items(provider, env),
        })
        .collect()
}

/// [`explain`] for a config file's text; `None` when the text is not a config (whose problems
/// the loader reports).
pub fn explain_toml(text: &str, env: EnvLookup<'_>) -> Option<Vec<ProviderCredentials>> {
    let raw: RawConfig = toml::from_str(text).ok()?;
    Some(explain(&raw, env))
}

/// One upstream MCP server's secrets, as `rein check` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerCredentials {
    pub server: String,
    /// `http` or `stdio`.
    pub transport: &'static str,
    pub items: Vec<CredentialItem>,
}

/// The secrets of every upstream MCP server of a config file (its `headers_env` and
/// `env_from`), in the order of their names; `None` when the text is not a config.
pub fn explain_mcp_toml(text: &str, env: EnvLookup<'_>) -> Option<Vec<McpServerCredentials>> {
    let raw: RawConfig = toml::from_str(text).ok()?;
    let set = |var: &str| env(var).is_some_and(|value| !value.is_empty());
    let servers = raw.mcp.servers.iter().map(|(name, server)| {
        let (transport, what, vars) = match &server.command {
            Some(_) => ("stdio", "variable", &server.env_from),
            None => ("http", "header", &server.headers_env),
        };
        let items = vars
            .iter()
            .map(|(name, var)| CredentialItem {
                what,
                source: format!("`{name}` from environment variable `{var}`"),
                state: if set(var) { CredentialState::Found } else { CredentialState::Missing },
            })
            .collect();
        McpServerCredentials { server: name.clone(), transport, items }
    });
    Some(servers.collect())
}

impl fmt::Display for McpServerCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.items.is_empty() {
            return write!(
                f,
                "mcp.servers.{} ({}): no secrets configured",
                self.server, self.transport
            );
        }
        write!(f, "mcp.servers.{} ({}):", self.server, self.transport)?;
        for item in &self.items {
            let state = match item.state {
                CredentialState::Found => "found",
                _ => "MISSING",
            };
            write!(f, "\n  {}: {state}, {}", item.what, item.source)?;
        }
        Ok(())
    }
}

fn items(raw: &RawProvider, env: EnvLookup<'_>) -> Vec<CredentialItem> {
    let set = |var: &str| env(var).is_some_and(|value| !value.is_empty());
    let from_var = |what: &'static str, var: &str, needed: bool| CredentialItem {
        what,
        source: format!("environment variable `{var}`"),
        state: match (set(var), needed) {
            (true, _) => CredentialState::Found,
            (false, true) => CredentialState::Missing,
            (false, false) => CredentialState::Absent,
        },
    };
    match raw.kind {
        ProviderKind::Sim | ProviderKind::Replay => Vec::new(),
        ProviderKind::Bedrock => aws_items(raw, env),
        ProviderKind::Vertex => vertex_items(raw, env),
        ProviderKind::Openai
        | ProviderKind::Anthropic
        | ProviderKind::AzureOpenai
        | ProviderKind::Gemini => match &raw.api_key_env {
            Some(var) => vec![from_var("API key", var, true)],
            None => vec![CredentialItem {
                what: "API key",
                source: "no `api_key_env` in the config (this kind needs one)".into(),
                state: CredentialState::Missing,
            }],
        },
        ProviderKind::OpenaiCompatible => match &raw.api_key_env {
            Some(var) => vec![from_var("API key", var, true)],
            None => vec![CredentialItem {
                what: "API key",
                source: "none configured (local servers often need none)".into(),
                state: CredentialState::Absent,
            }],
        },
    }
}

/// Bedrock: the region and the keys, from the variables first and else from the shared
/// credentials file's profile, where [`super::AwsPlaces`] says the loader reads them.
fn aws_items(raw: &RawProvider, env: EnvLookup<'_>) -> Vec<CredentialItem> {
    let places = super::AwsPlaces::of(raw, env);
    let value = |var: &str| env(var).filter(|value| !value.is_empty());
    let mut items = Vec::new();
    items.push(match &places.region {
        Some((_, named_by)) => CredentialItem {
            what: "region",
            source: match named_by {
                None => "`region` in the config".to_string(),
                Some(var) => format!("environment variable `{var}`"),
            },
            state: CredentialState::Found,
        },
        None => CredentialItem {
            what: "region",
            source: "`region` in the config, or `AWS_REGION` / `AWS_DEFAULT_REGION`".into(),
            state: CredentialState::Missing,
        },
    });
    let (id_var, secret_var, token_var) =
        (&places.access_key_id_var, &places.secret_access_key_var, &places.session_token_var);
    let state = |found: bool, needed: bool| match (found, needed) {
        (true, _) => CredentialState::Found,
        (false, true) => CredentialState::Missing,
        (false, false) => CredentialState::Absent,
    };
    // The loader reads the profile only when neither key variable is set.
    if value(id_var).is_some() || value(secret_var).is_some() {
        for (what, var, needed) in [
            ("access key id", id_var, true),
            ("secret access key", secret_var, true),
            ("session token", token_var, false),
        ] {
            items.push(CredentialItem {
                what,
                source: format!("environment variable `{var}`"),
                state: state(value(var).is_some(), needed),
            });
        }
        return items;
    }
    let profile = &places.profile;
    let found = places
        .credentials_file
        .as_deref()
        .and_then(|path| super::profile_credentials(path, profile));
    let shown_file = if places.credentials_file_from_env {
        "the file `AWS_SHARED_CREDENTIALS_FILE` names"
    } else {
        "~/.aws/credentials"
    };
    let (id, secret, token) = match &found {
        Some(found) => (
            found.access_key_id.is_some(),
            found.secret_access_key.is_some(),
            found.session_token.is_some(),
        ),
        None => (false, false, false),
    };
    for (what, var, key, found, needed) in [
        ("access key id", id_var, "aws_access_key_id", id, true),
        ("secret access key", secret_var, "aws_secret_access_key", secret, true),
        ("session token", token_var, "aws_session_token", token, false),
    ] {
        items.push(CredentialItem {
            what,
            source: format!(
                "environment variable `{var}` (unset), else `{key}` of profile `{profile}` in {shown_file}"
            ),
            state: state(found, needed),
        });
    }
    items
}

/// Vertex: the project, the region and where access tokens come from, as
/// [`super::vertex::settings`] reads them.
fn vertex_items(raw: &RawProvider, env: EnvLookup<'_>) -> Vec<CredentialItem> {
    let value = |var: &str| env(var).filter(|value| !value.trim().is_empty());
    let (key_file, named_by) = match &raw.credentials_file {
        Some(path) => (Some(path.clone()), "`credentials_file`"),
        None => (value("GOOGLE_APPLICATION_CREDENTIALS"), "`GOOGLE_APPLICATION_CREDENTIALS`"),
    };
    let key = key_file.as_deref().map(super::vertex::read_key);
    let mut items = Vec::new();
    let project = if raw.project.is_some() {
        Some("`project` in the config".to_string())
    } else if value("GOOGLE_CLOUD_PROJECT").is_some() {
        Some("environment variable `GOOGLE_CLOUD_PROJECT`".to_string())
    } else if matches!(&key, Some(Ok(key)) if key.project_id.is_some()) {
        Some(format!("the `project_id` of the key file {named_by} names"))
    } else {
        None
    };
    items.push(match project {
        Some(source) => CredentialItem { what: "project", source, state: CredentialState::Found },
        None => CredentialItem {
            what: "project",
            source: "`project` in the config, `GOOGLE_CLOUD_PROJECT`, or a key file's `project_id`"
                .into(),
            state: CredentialState::Missing,
        },
    });
    let region = if raw.region.is_some() {
        Some("`region` in the config".to_string())
    } else {
        ["GOOGLE_CLOUD_LOCATION", "CLOUD_ML_REGION"]
            .into_iter()
            .find(|var| value(var).is_some())
            .map(|var| format!("environment variable `{var}`"))
    };
    items.push(match region {
        Some(source) => CredentialItem { what: "region", source, state: CredentialState::Found },
        None => CredentialItem {
            what: "region",
            source: "`region` in the config, or `GOOGLE_CLOUD_LOCATION` / `CLOUD_ML_REGION`".into(),
            state: CredentialState::Missing,
        },
    });
    items.push(match (&key_file, &key) {
        (Some(path), Some(Ok(key))) => CredentialItem {
            what: "access tokens",
            source: format!(
                "the service-account key `{path}` ({named_by}; account {}, token endpoint {})",
                key.client_email, key.token_uri
            ),
            state: CredentialState::Found,
        },
        (Some(path), Some(Err(reason))) => CredentialItem {
            what: "access tokens",
            source: format!("the service-account key `{path}` ({named_by}), which {reason}"),
            state: CredentialState::Missing,
        },
        _ => CredentialItem {
            what: "access tokens",
            source: format!(
                "the metadata server at {} (no `credentials_file`, `GOOGLE_APPLICATION_CREDENTIALS` unset): it answers only on Google Cloud",
                value("GCE_METADATA_HOST")
                    .unwrap_or_else(|| rein_providers::GCE_METADATA_DEFAULT_HOST.to_owned())
            ),
            state: CredentialState::Unchecked,
        },
    });
    items
}

impl fmt::Display for ProviderCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = serde_json::to_value(self.kind)
            .ok()
            .and_then(|value| value.as_str().map(str::to_owned))
            .unwrap_or_default();
        if self.items.is_empty() {
            return write!(
                f,
                "providers.{} ({kind}): no credentials needed (served in-process)",
                self.provider
            );
        }
        write!(f, "providers.{} ({kind}):", self.provider)?;
        for item in &self.items {
            let state = match item.state {
                CredentialState::Found => "found",
                CredentialState::Missing => "MISSING",
                CredentialState::Absent => "not set (optional)",
                CredentialState::Unchecked => "not checked here",
            };
            write!(f, "\n  {}: {state}, from {}", item.what, item.source)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawConfig {
        toml::from_str(text).expect("a raw config")
    }

    #[test]
    fn an_api_key_is_found_or_missing_by_its_variable_and_its_value_never_shows() {
        let config = raw("[providers.a]\nkind = \"openai\"\napi_key_env = \"A_KEY\"\n\
             [providers.b]\nkind = \"anthropic\"\napi_key_env = \"B_KEY\"\n\
             [providers.s]\nkind = \"sim\"\n");
        let env = |name: &str| (name == "A_KEY").then(|| "sk-very-secret".to_string());
        let report = explain(&config, &env);
        let text: Vec<String> = report.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "providers.a (openai):\n  API key: found, from environment variable `A_KEY`",
                "providers.b (anthropic):\n  API key: MISSING, from environment variable `B_KEY`",
                "providers.s (sim): no credentials needed (served in-process)",
            ]
        );
        assert!(report[0].complete() && !report[1].complete() && report[2].complete());
        assert!(!text.concat().contains("sk-very-secret"));
    }

    #[test]
    fn bedrock_reads_the_variables_first_then_the_profile_as_the_loader_does() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s3cr3t-default\n\
             [ops]\naws_access_key_id = AKIDOPS\n",
        )
        .expect("write");
        let file = file.display().to_string();
        let config = raw("[providers.b]\nkind = \"bedrock\"\nregion = \"us-east-1\"\n");
        // No variables: the default profile has both keys.
        let env = |name: &str| (name == "AWS_SHARED_CREDENTIALS_FILE").then(|| file.clone());
        let report = explain(&config, &env).remove(0);
        assert!(report.complete(), "{report}");
        let text = report.to_string();
        assert!(text.contains("access key id: found, from environment variable `AWS_ACCESS_KEY_ID` (unset), else `aws_access_key_id` of profile `default`"), "{text}");
        assert!(text.contains("session token: not set (optional)"), "{text}");
        assert!(!text.contains("AKIDDEFAULT") && !text.contains("s3cr3t"), "{text}");
        // Profile `ops` lacks its secret key: that one is missing, by name.
        let env = |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(file.clone()),
            "AWS_PROFILE" => Some("ops".into()),
            _ => None,
        };
        let report = explain(&config, &env).remove(0);
        assert!(!report.complete());
        assert!(report.to_string().contains("secret access key: MISSING"), "{report}");
        // One variable set: the profile is not read, so the other variable is missing.
        let env = |name: &str| match name {
            "AWS_SHARED_CREDENTIALS_FILE" => Some(file.clone()),
            "AWS_ACCESS_KEY_ID" => Some("AKIDENV".into()),
            _ => None,
        };
        let report = explain(&config, &env).remove(0);
        assert_eq!(
            report.items[2],
            CredentialItem {
                what: "secret access key",
                source: "environment variable `AWS_SECRET_ACCESS_KEY`".into(),
                state: CredentialState::Missing,
            }
        );
        // No region anywhere.
        let config = raw("[providers.b]\nkind = \"bedrock\"\n");
        let report = explain(&config, &|_: &str| None).remove(0);
        assert_eq!(report.items[0].what, "region");
        assert_eq!(report.items[0].state, CredentialState::Missing);
    }

    #[test]
    fn vertex_names_its_project_region_and_token_source() {
        let config = raw("[providers.v]\nkind = \"vertex\"\npublisher = \"google\"\n");
        // Nothing set: project and region missing, tokens from the metadata server, unchecked.
        let report = explain(&config, &|_: &str| None).remove(0);
        let states: Vec<_> = report.items.iter().map(|item| (item.what, item.state)).collect();
        assert_eq!(
            states,
            [
                ("project", CredentialState::Missing),
                ("region", CredentialState::Missing),
                ("access tokens", CredentialState::Unchecked),
            ]
        );
        assert!(report.to_string().contains("the metadata server at metadata.google.internal"));
        // A key file that is not a key: missing, with the loader's reason; the variables found.
        let dir = tempfile::tempdir().expect("a temp dir");
        let file = dir.path().join("key.json");
        std::fs::write(
            &file,
            "{\"type\": \"service_account\", \"private_key\": \"not-a-key-secret\"}",
        )
        .expect("write");
        let path = file.display().to_string();
        let env = |name: &str| match name {
            "GOOGLE_APPLICATION_CREDENTIALS" => Some(path.clone()),
            "GOOGLE_CLOUD_PROJECT" => Some("p".into()),
            "CLOUD_ML_REGION" => Some("us-east5".into()),
            _ => None,
        };
        let report = explain(&config, &env).remove(0);
        let text = report.to_string();
        assert!(
            text.contains("project: found, from environment variable `GOOGLE_CLOUD_PROJECT`"),
            "{text}"
        );
        assert!(
            text.contains("region: found, from environment variable `CLOUD_ML_REGION`"),
            "{text}"
        );
        assert!(text.contains("access tokens: MISSING, from the service-account key"), "{text}");
        assert!(text.contains("(`GOOGLE_APPLICATION_CREDENTIALS`), which "), "{text}");
        assert!(!text.contains("not-a-key-secret"), "{text}");
    }
}
