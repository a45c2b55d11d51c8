//! The gateway's config loader on arbitrary TOML: parsing and validation must never panic, and
//! a refused config must say at least one problem. Validation runs twice, with no environment
//! variable set and with every one set, so both sides of each `*_env` check are reached.
//!
//! Validation reads the files a config names (TLS PEMs, schema files, Vertex keys, AWS
//! credentials): the target points every such path at one that cannot be opened (it holds a
//! NUL byte), so no input can make the fuzzer read `/dev/zero` or wait on `/dev/stdin`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rein_runtime::config::raw::RawConfig;
use rein_runtime::config::{Config, ConfigError, validate};

/// A path no file system opens.
const NO_FILE: &str = "fuzz\0no-such-file";

/// Every variable set: a postgres URL (so `postgres_url_env` passes), except the ones naming
/// files, which name none.
fn every_variable(name: &str) -> Option<String> {
    match name {
        "HOME" | "AWS_SHARED_CREDENTIALS_FILE" | "GOOGLE_APPLICATION_CREDENTIALS" => {
            Some(NO_FILE.to_string())
        }
        _ => Some("postgres://fuzz@localhost/fuzz".to_string()),
    }
}

fn no_variable(_: &str) -> Option<String> {
    None
}

fn without_files(mut raw: RawConfig) -> RawConfig {
    if let Some(tls) = &mut raw.server.tls {
        tls.cert_path = NO_FILE.to_string();
        tls.key_path = NO_FILE.to_string();
    }
    for provider in raw.providers.values_mut() {
        for path in [&mut provider.credentials_file, &mut provider.cassette, &mut provider.scenario]
        {
            if path.is_some() {
                *path = Some(NO_FILE.to_string());
            }
        }
    }
    for route in raw.routes.values_mut() {
        if let Some(output) = &mut route.output
            && output.schema_file.is_some()
        {
            output.schema_file = Some(NO_FILE.to_string());
        }
    }
    raw
}

fn check(result: Result<Config, ConfigError>) {
    if let Err(error) = result {
        assert!(!error.problems.is_empty(), "a refused config with no problem");
    }
}

fuzz_target!(|text: &str| {
    match toml::from_str::<RawConfig>(text) {
        Err(_) => {
            // Refused before validation, so before any file is read.
            let loaded = Config::from_toml(text, &no_variable);
            assert!(loaded.is_err(), "toml refuses what the loader accepts");
            check(loaded);
        }
        Ok(raw) => {
            let raw = without_files(raw);
            check(validate(raw.clone(), &no_variable));
            check(validate(raw, &every_variable));
        }
    }
});
