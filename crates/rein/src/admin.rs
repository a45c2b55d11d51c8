//! The CLI's client of a running gateway's admin API (`rein versions`, `rein outbox`,
//! `rein approvals`): the admin key from the environment variable the user names, one request,
//! the JSON answer, and how an answer is printed.

use std::io::Write;

use anyhow::Context;
use serde_json::Value;

/// The flags every admin command takes (also after its subcommand).
#[derive(Debug, clap::Args)]
pub(crate) struct AdminFlags {
    /// The gateway's address.
    #[arg(long, global = true, default_value = "http://127.0.0.1:8787")]
    pub url: String,
    /// Environment variable holding the admin key.
    #[arg(long, global = true, default_value = "REIN_ADMIN_KEY")]
    pub admin_key_env: String,
    /// Print the admin API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

impl AdminFlags {
    /// The gateway's admin API these flags name.
    pub(crate) fn admin(&self) -> anyhow::Result<Admin> {
        Admin::new(&self.url, &self.admin_key_env)
    }
}

/// A gateway's admin API.
#[derive(Debug)]
pub(crate) struct Admin {
    client: reqwest::Client,
    base: String,
    key: String,
}

impl Admin {
    /// The gateway at `url`, with the admin key read from the variable `key_env`.
    pub(crate) fn new(url: &str, key_env: &str) -> anyhow::Result<Admin> {
        let key = std::env::var(key_env)
            .with_context(|| format!("set {key_env} to the gateway's admin key"))?;
        let base = url.trim_end_matches('/').to_string();
        Ok(Admin { client: reqwest::Client::new(), base, key })
    }

    pub(crate) fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(format!("{}{path}", self.base))
    }

    pub(crate) fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.base))
    }

    pub(crate) fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.delete(format!("{}{path}", self.base))
    }

    /// The gateway's base URL.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// Send `request` with the admin key; the status and the JSON body.
    pub(crate) async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> anyhow::Result<(reqwest::StatusCode, Value)> {
        let response = request
            .bearer_auth(&self.key)
            .send()
            .await
            .with_context(|| format!("cannot reach {}", self.base))?;
        let status = response.status();
        let body =
            response.json().await.context("the gateway answered with something other than JSON")?;
        Ok((status, body))
    }
}

/// Print an answer: an error as `error (<status>): <message>` (exit 1), else `render`'s output.
pub(crate) fn print(
    status: reqwest::StatusCode,
    body: &Value,
    render: impl FnOnce(&mut dyn Write, &Value) -> std::io::Result<()>,
) -> anyhow::Result<std::process::ExitCode> {
    let mut stdout = std::io::stdout().lock();
    if !status.is_success() {
        let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("");
        writeln!(stdout, "error ({status}): {message}")?;
        return Ok(std::process::ExitCode::FAILURE);
    }
    render(&mut stdout, body)?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// The answer as pretty JSON.
pub(crate) fn json(out: &mut dyn Write, body: &Value) -> std::io::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(body).unwrap_or_default())
}
