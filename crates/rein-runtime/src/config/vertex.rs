//! A Vertex AI provider's settings from the config and the environment, as Google's libraries
//! find them: `project` (else `GOOGLE_CLOUD_PROJECT`, else the key file's `project_id`),
//! `region` (else `GOOGLE_CLOUD_LOCATION`, else `CLOUD_ML_REGION`), `publisher` (required),
//! and the credentials: the service-account key `credentials_file` (else the file
//! `GOOGLE_APPLICATION_CREDENTIALS` names), read and checked here; without either, the
//! metadata server (`GCE_METADATA_HOST`, else `metadata.google.internal`). Each missing or
//! unusable setting is a problem naming its key, never a secret.

use rein_providers::{
    GCE_METADATA_DEFAULT_HOST, ServiceAccountKey, VertexConfig, VertexCredentials, VertexPublisher,
};

use super::EnvLookup;
use super::raw::RawProvider;
use rein_core::problems::Problems;

/// The largest key file read (Google's are about 2.3 KB).
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// The publisher, read from `publisher`, or a problem.
pub(super) fn publisher(
    raw: &RawProvider,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> Option<VertexPublisher> {
    match raw.publisher.as_deref() {
        Some("anthropic") => Some(VertexPublisher::Anthropic),
        Some("google") => Some(VertexPublisher::Google),
        Some(other) => {
            problems.add(
                key("publisher"),
                format!("`{other}` is not a Vertex publisher here: use `anthropic` (Claude) or `google` (Gemini)"),
            );
            None
        }
        None => {
            problems.add(
                key("publisher"),
                "is required for kind `vertex`: `anthropic` (Claude) or `google` (Gemini)",
            );
            None
        }
    }
}

/// The adapter's config for kind `vertex`, or `None` with the problems added.
pub(super) fn settings(
    name: &str,
    raw: &RawProvider,
    env: EnvLookup<'_>,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> Option<VertexConfig> {
    let publisher = publisher(raw, key, problems);
    let credentials = credentials(raw, env, key, problems);
    let key_project = match &credentials {
        Some(VertexCredentials::ServiceAccount { key, .. }) => key.project_id.clone(),
        _ => None,
    };
    let project = raw
        .project
        .clone()
        .or_else(|| env("GOOGLE_CLOUD_PROJECT"))
        .or(key_project)
        .filter(|project| !project.trim().is_empty());
    if project.is_none() {
        problems.add(
            key("project"),
            "is required for kind `vertex` (or set `GOOGLE_CLOUD_PROJECT`, or use a key file that names its `project_id`)",
        );
    }
    let region = raw
        .region
        .clone()
        .or_else(|| env("GOOGLE_CLOUD_LOCATION"))
        .or_else(|| env("CLOUD_ML_REGION"))
        .filter(|region| !region.trim().is_empty());
    if region.is_none() {
        problems.add(
            key("region"),
            "is required for kind `vertex` (or set `GOOGLE_CLOUD_LOCATION`): the Vertex location, like `us-east5`, `europe-west1` or `global`",
        );
    }
    let mut config = VertexConfig::new(name, project?, region?, publisher?, credentials?);
    config.base_url = raw.base_url.clone();
    Some(config)
}

/// The in-process simulator's Vertex tier: its key and base URL are filled in when it starts.
pub(super) fn sim_settings(
    name: &str,
    raw: &RawProvider,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> Option<VertexConfig> {
    let publisher = publisher(raw, key, problems)?;
    let project = raw.project.clone().unwrap_or_else(|| "rein-sim".to_owned());
    let region = raw.region.clone().unwrap_or_else(|| "us-east5".to_owned());
    let placeholder = VertexCredentials::Metadata { host: "127.0.0.1".to_owned() };
    Some(VertexConfig::new(name, project, region, publisher, placeholder))
}

/// The key file's credentials, or the metadata server's when no file is named.
fn credentials(
    raw: &RawProvider,
    env: EnvLookup<'_>,
    key: &dyn Fn(&str) -> String,
    problems: &mut Problems,
) -> Option<VertexCredentials> {
    let (path, from_env) = match &raw.credentials_file {
        Some(path) => (Some(path.clone()), false),
        None => (env("GOOGLE_APPLICATION_CREDENTIALS").filter(|p| !p.is_empty()), true),
    };
    let Some(path) = path else {
        let host = env("GCE_METADATA_HOST")
            .filter(|host| !host.trim().is_empty())
            .unwrap_or_else(|| GCE_METADATA_DEFAULT_HOST.to_owned());
        return Some(VertexCredentials::Metadata { host });
    };
    let named = match from_env {
        true => format!("`{path}` (named by `GOOGLE_APPLICATION_CREDENTIALS`)"),
        false => format!("`{path}`"),
    };
    match read_key(&path) {
        Ok(key) => Some(VertexCredentials::ServiceAccount { path: Some(path), key }),
        Err(reason) => {
            problems.add(key("credentials_file"), format!("{named} {reason}"));
            None
        }
    }
}

pub(super) fn read_key(path: &str) -> Result<ServiceAccountKey, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be read: {e}"))?;
    let mut bytes = Vec::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if bytes.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "is larger than {MAX_KEY_FILE_BYTES} bytes: not a service-account key"
        ));
    }
    ServiceAccountKey::from_json(&bytes)
}
