//! The webhook rule: a business rule behind an HTTP endpoint, configured per route as
//! `webhooks = [{ name, url, timeout_ms }]` and run after the built-in rules. rein POSTs
//! `{"rule": name, "answer": {"text": …, "json": …}, "evidence": [...]}` and expects
//! `{"problems": [{"message": "…", "path": "/x"}]}` back (an empty list passes). Each problem's
//! message is the sentence a re-ask sends the model, so a webhook words it for the model.
//!
//! A check that cannot run — it timed out, could not connect, answered a non-2xx status or a
//! body of another shape — is reported as [`Problem::rule_unavailable`]: a failed check, never
//! a pass. The timeout runs on tokio's clock and covers the whole exchange, body included.

use std::time::Duration;

use futures_util::future::BoxFuture;
use rein_core::CallContext;
use rein_core::validate::{Answer, Evidence, Problem, Rule};
use rein_providers::error_chain;
use serde::Deserialize;
use serde_json::json;

use crate::config::WebhookConfig;

/// The largest reply read; a list of problems is small, and a misbehaving endpoint must not
/// stream an endless page into memory.
const MAX_REPLY_BYTES: usize = 64 * 1024;

/// A route's webhook rule.
#[derive(Debug, Clone)]
pub struct WebhookRule {
    name: String,
    url: reqwest::Url,
    timeout: Duration,
    client: reqwest::Client,
}

/// Why a webhook rule could not be built from its (validated) config.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("webhook `{name}`: `{url}` is not a URL: {detail}")]
pub struct WebhookError {
    pub name: String,
    pub url: String,
    pub detail: String,
}

#[derive(Debug, Deserialize)]
struct Reply {
    problems: Vec<ReplyProblem>,
}

#[derive(Debug, Deserialize)]
struct ReplyProblem {
    message: String,
    #[serde(default)]
    path: Option<String>,
}

impl WebhookRule {
    /// The rule for one configured webhook, sending through `client` (see [`client`]).
    pub fn new(config: &WebhookConfig, client: reqwest::Client) -> Result<Self, WebhookError> {
        let url = reqwest::Url::parse(&config.url).map_err(|error| WebhookError {
            name: config.name.clone(),
            url: config.url.clone(),
            detail: error.to_string(),
        })?;
        Ok(Self { name: config.name.clone(), url, timeout: config.timeout, client })
    }

    /// Ask the endpoint; `Err` says why the check could not run.
    async fn ask(&self, answer: &Answer, evidence: &Evidence) -> Result<Vec<Problem>, String> {
        let body = json!({
            "rule": self.name,
            "answer": {"text": answer.text, "json": answer.json},
            "evidence": evidence,
        });
        let mut response =
            self.client.post(self.url.clone()).json(&body).send().await.map_err(|error| {
                format!("the request failed: {}", error_chain(&error.without_url()))
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("it answered status {}", status.as_u16()));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|error| {
            format!("its reply broke off: {}", error_chain(&error.without_url()))
        })? {
            bytes.extend_from_slice(&chunk);
            if bytes.len() > MAX_REPLY_BYTES {
                return Err(format!("its reply is larger than {MAX_REPLY_BYTES} bytes"));
            }
        }
        let reply: Reply = serde_json::from_slice(&bytes).map_err(|error| {
            format!("its reply is not `{{\"problems\": [{{\"message\": ..., \"path\": ...}}]}}`: {error}")
        })?;
        reply
            .problems
            .into_iter()
            .enumerate()
            .map(|(index, problem)| {
                if problem.message.trim().is_empty() {
                    return Err(format!("problem {index} of its reply has no message"));
                }
                if let Some(path) = &problem.path
                    && !(path.is_empty() || path.starts_with('/'))
                {
                    return Err(format!(
                        "problem {index} of its reply has path `{path}`, which is not a JSON pointer"
                    ));
                }
                Ok(Problem::rule(&self.name, problem.path.as_deref(), problem.message))
            })
            .collect()
    }
}

impl Rule for WebhookRule {
    fn name(&self) -> &str {
        &self.name
    }

    /// The webhook gets its own timeout cut to what the call has left: a check never keeps a
    /// call past its deadline, and one that cannot finish in time is an unavailable check.
    fn check<'a>(
        &'a self,
        ctx: &'a CallContext,
        answer: &'a Answer,
    ) -> BoxFuture<'a, Vec<Problem>> {
        Box::pin(async move {
            let budget = ctx.deadline().cut(self.timeout);
            let outcome = if budget.is_zero() {
                Err("no time left before the call's deadline".to_string())
            } else {
                match tokio::time::timeout(budget, self.ask(answer, &ctx.evidence)).await {
                    Ok(outcome) => outcome,
                    Err(_) if budget < self.timeout => Err(format!(
                        "timed out after {} ms, at the call's deadline",
                        budget.as_millis()
                    )),
                    Err(_) => Err(format!("timed out after {} ms", budget.as_millis())),
                }
            };
            match outcome {
                Ok(problems) => problems,
                Err(detail) => {
                    tracing::warn!(
                        rule = %self.name,
                        detail = %detail,
                        "a webhook rule could not run; the answer is not accepted"
                    );
                    vec![Problem::rule_unavailable(&self.name, &detail)]
                }
            }
        })
    }
}

/// The HTTP client every webhook rule shares: pooled, bounded connect, no redirects (a
/// redirected POST is a config error worth seeing) and no retries (a check runs once; its
/// failure is a failed check).
pub fn client(connect_timeout: Duration) -> Result<reqwest::Client, String> {
    rein_providers::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .user_agent(concat!("rein/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| error_chain(&error))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use super::*;
    use rein_core::validate::{EvidenceItem, ProblemKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-shot HTTP server that answers every connection with `reply` after `delay`.
    async fn serve(reply: &'static str, delay: Duration) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 16 * 1024];
                    let _ = socket.read(&mut buffer).await;
                    tokio::time::sleep(delay).await;
                    let _ = socket.write_all(reply.as_bytes()).await;
                });
            }
        });
        format!("http://{addr}/check")
    }

    fn rule(url: String, timeout_ms: u64) -> WebhookRule {
        let config = WebhookConfig {
            name: "policy".into(),
            url,
            timeout: Duration::from_millis(timeout_ms),
        };
        WebhookRule::new(&config, client(Duration::from_secs(1)).unwrap()).unwrap()
    }

    async fn check(reply: &'static str, delay_ms: u64, timeout_ms: u64) -> Vec<Problem> {
        let url = serve(reply, Duration::from_millis(delay_ms)).await;
        let evidence = Evidence::new().with(EvidenceItem::new("search", "140", "48 hours"));
        let ctx = CallContext::new().evidence(evidence);
        rule(url, timeout_ms).check(&ctx, &Answer::text("hello")).await
    }

    fn http(status: &str, body: &str) -> &'static str {
        let text = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        Box::leak(text.into_boxed_str())
    }

    #[tokio::test]
    async fn problems_come_back_as_rule_problems_and_an_empty_list_passes() {
        let problems = check(
            http(
                "200 OK",
                r#"{"problems":[{"message":"do not promise refunds","path":"/reply"}]}"#,
            ),
            0,
            2000,
        )
        .await;
        assert_eq!(
            problems,
            vec![Problem::rule("policy", Some("/reply"), "do not promise refunds")]
        );
        assert_eq!(check(http("200 OK", r#"{"problems":[]}"#), 0, 2000).await, vec![]);
    }

    #[tokio::test]
    async fn every_failure_is_an_unavailable_check_never_a_pass() {
        let cases = [
            (http("500 Internal Server Error", "{}"), 0, "answered status 500"),
            (http("200 OK", "not json"), 0, "is not `{\"problems\""),
            (http("200 OK", r#"{"problems":[{"message":""}]}"#), 0, "has no message"),
            (
                http("200 OK", r#"{"problems":[{"message":"x","path":"x"}]}"#),
                0,
                "not a JSON pointer",
            ),
            (http("200 OK", r#"{"problems":[]}"#), 500, "timed out after 100 ms"),
        ];
        for (reply, delay, needle) in cases {
            let problems = check(reply, delay, 100).await;
            assert_eq!(problems.len(), 1, "{needle}");
            assert_eq!(problems[0].kind, ProblemKind::RuleUnavailable("policy".into()));
            assert!(problems[0].message.contains(needle), "{needle}: {}", problems[0].message);
        }
        // Nothing listening.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/check", listener.local_addr().unwrap());
        drop(listener);
        let problems = rule(url, 1000).check(&CallContext::new(), &Answer::text("x")).await;
        assert_eq!(problems[0].kind, ProblemKind::RuleUnavailable("policy".into()));
        assert!(problems[0].message.contains("the request failed"), "{}", problems[0].message);
    }

    /// The bug this guards: a webhook rule ran on its own timeout whatever the call had left, so
    /// a call with 2 s left could wait on a slow webhook for its whole timeout.
    #[tokio::test(start_paused = true)]
    async fn a_webhook_never_outlives_the_callers_deadline() {
        // The webhook would answer in 5 s, inside its own 10 s timeout; the call has 2 s left.
        let url = serve(http("200 OK", r#"{"problems":[]}"#), Duration::from_secs(5)).await;
        let ctx = CallContext::with_deadline(Duration::from_secs(2));
        let started = tokio::time::Instant::now();
        let problems = rule(url.clone(), 10_000).check(&ctx, &Answer::text("x")).await;
        let elapsed = started.elapsed();
        assert!(elapsed <= Duration::from_secs(2), "ended inside the call's 2 s: {elapsed:?}");
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].kind, ProblemKind::RuleUnavailable("policy".into()));
        assert!(problems[0].message.contains("at the call's deadline"), "{}", problems[0].message);

        // With the deadline passed, the webhook is not asked at all.
        let problems = rule(url, 10_000).check(&ctx, &Answer::text("x")).await;
        assert!(problems[0].message.contains("no time left"), "{}", problems[0].message);
        assert_eq!(started.elapsed(), elapsed);
    }
}
