//! Vertex AI's access tokens: from a service-account key, an RS256-signed JWT assertion
//! (`iss` the key's `client_email`, `scope` cloud-platform, `aud` the key's `token_uri`, `iat`,
//! `exp` an hour later) exchanged at `token_uri` with the `jwt-bearer` grant; without a key, the
//! metadata server's `.../service-accounts/default/token` with `Metadata-Flavor: Google`.
//!
//! A token is cached until `margin` before its `expires_in` runs out (measured on tokio's
//! clock), and one fetch at a time runs: concurrent calls wait for it and share its token. A
//! 401 from Vertex drops the token it was sent with ([`TokenSource::drop_token`]), so the next
//! attempt fetches another. A fetch is bounded in time and in size; a failed one fails the
//! attempt: unreachable or silent as a connection failure, a refusal as the token endpoint's
//! HTTP error (`invalid_grant` and the like read as an unauthorized key by rein-core). Every
//! message names the token source, never the key or a token.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use futures_util::StreamExt;
use http::Method;
use reqwest::Url;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use ring::rand::SystemRandom;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use rein_core::{Failure, HttpError, WireFormat};

use crate::client::{Endpoint, HttpClient};
use crate::config::{ConfigError, HttpVersion, VERTEX_SCOPE, VertexCredentials};
use crate::secret::Secret;

/// Most bytes of a token response read (Google's are a few hundred).
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;
/// The lifetime asked for in an assertion (`exp - iat`), the most Google allows.
const ASSERTION_LIFETIME_S: u64 = 3600;
/// The grant of a signed-JWT exchange (RFC 7523).
pub const JWT_BEARER_GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The metadata server's token path.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// A key checked and ready to sign, or the metadata server's URL.
pub(crate) enum Prepared {
    ServiceAccount {
        key_pair: Arc<RsaKeyPair>,
        email: String,
        key_id: Option<String>,
        token_uri: Url,
    },
    Metadata {
        url: Url,
    },
}

/// Checks credentials without a client: a private key ring can sign with, a token URL.
pub(crate) fn prepare(
    provider: &str,
    credentials: &VertexCredentials,
) -> Result<Prepared, ConfigError> {
    let invalid = |key: &'static str, reason: String| ConfigError::InvalidSetting {
        provider: provider.to_owned(),
        key,
        reason,
    };
    match credentials {
        VertexCredentials::ServiceAccount { key, .. } => {
            let der = PrivatePkcs8KeyDer::from_pem_slice(key.private_key.expose().as_bytes())
                .map_err(|_| {
                    invalid(
                        "credentials_file",
                        "its `private_key` is not a PKCS#8 PEM key (`-----BEGIN PRIVATE KEY-----`)"
                            .into(),
                    )
                })?;
            let key_pair = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).map_err(|rejected| {
                invalid(
                    "credentials_file",
                    format!("its `private_key` is not a usable RSA key ({rejected})"),
                )
            })?;
            let token_uri = Url::parse(&key.token_uri)
                .ok()
                .filter(|url| matches!(url.scheme(), "http" | "https"))
                .ok_or_else(|| {
                    invalid(
                        "credentials_file",
                        format!("its `token_uri` ({}) is not an http(s) URL", key.token_uri),
                    )
                })?;
            Ok(Prepared::ServiceAccount {
                key_pair: Arc::new(key_pair),
                email: key.client_email.clone(),
                key_id: key.private_key_id.clone(),
                token_uri,
            })
        }
        VertexCredentials::Metadata { host } => {
            let url = Url::parse(&format!("http://{}{METADATA_TOKEN_PATH}", host.trim()))
                .ok()
                .filter(|url| url.host_str().is_some_and(|h| !h.is_empty()))
                .ok_or_else(|| {
                    invalid("credentials_file", format!("the metadata host `{host}` makes no URL"))
                })?;
            Ok(Prepared::Metadata { url })
        }
    }
}

/// An RS256-signed JWT assertion for `email`'s token at `audience`, issued at `iat` (Unix s).
pub(crate) fn assertion(
    key_pair: &RsaKeyPair,
    key_id: Option<&str>,
    email: &str,
    audience: &str,
    iat: u64,
) -> Result<String, Failure> {
    let mut header = json!({"alg": "RS256", "typ": "JWT"});
    if let Some(kid) = key_id {
        header["kid"] = json!(kid);
    }
    let claims = json!({
        "iss": email,
        "scope": VERTEX_SCOPE,
        "aud": audience,
        "iat": iat,
        "exp": iat + ASSERTION_LIFETIME_S,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut signature = vec![0; key_pair.public().modulus_len()];
    key_pair
        .sign(&RSA_PKCS1_SHA256, &SystemRandom::new(), signing_input.as_bytes(), &mut signature)
        .map_err(|_| Failure::Unsendable {
            detail: "the service-account key could not sign a token assertion".into(),
        })?;
    Ok(format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature)))
}

/// A token and when to stop using it.
struct Cached {
    token: Secret,
    refresh_at: Instant,
}

/// Where a provider's tokens come from, with the cache. Cheap to clone (shared).
#[derive(Clone)]
pub(crate) struct TokenSource {
    inner: Arc<Inner>,
}

struct Inner {
    source: Source,
    /// The source in words, for messages ("the token endpoint https://... of sa@p.iam...").
    label: String,
    format: WireFormat,
    client: HttpClient,
    margin: Duration,
    timeout: Duration,
    cache: tokio::sync::Mutex<Option<Cached>>,
}

enum Source {
    ServiceAccount {
        key_pair: Arc<RsaKeyPair>,
        email: String,
        key_id: Option<String>,
        token_uri: Url,
        endpoint: Endpoint,
    },
    Metadata {
        endpoint: Endpoint,
    },
}

/// What a token endpoint or metadata server answers.
#[derive(Deserialize)]
struct TokenResponse {
    access_token: Option<String>,
    expires_in: Option<u64>,
}

impl TokenSource {
    pub(crate) fn new(
        provider: &str,
        prepared: Prepared,
        format: WireFormat,
        client: HttpClient,
        margin: Duration,
        timeout: Duration,
    ) -> Result<Self, ConfigError> {
        let endpoint_of = |url: Url| {
            let shown = url.to_string();
            client.endpoint(url, HttpVersion::Http1).map_err(|error| ConfigError::InvalidSetting {
                provider: provider.to_owned(),
                key: "credentials_file",
                reason: format!("the token URL {shown} is not usable: {error}"),
            })
        };
        let (source, label) = match prepared {
            Prepared::ServiceAccount { key_pair, email, key_id, token_uri } => {
                let label = format!("the token endpoint {token_uri} (service account {email})");
                let endpoint = endpoint_of(token_uri.clone())?;
                (Source::ServiceAccount { key_pair, email, key_id, token_uri, endpoint }, label)
            }
            Prepared::Metadata { url } => {
                let label = format!("the metadata server {url}");
                (Source::Metadata { endpoint: endpoint_of(url)? }, label)
            }
        };
        let inner = Inner {
            source,
            label,
            format,
            client,
            margin,
            timeout,
            cache: tokio::sync::Mutex::new(None),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// The source in words (no secret).
    pub(crate) fn label(&self) -> &str {
        &self.inner.label
    }

    /// A token good for at least the refresh margin: the cached one, or a fresh one. Callers
    /// that arrive while a fetch runs wait for it.
    pub(crate) async fn token(&self) -> Result<Secret, Failure> {
        let inner = &self.inner;
        let mut cached = inner.cache.lock().await;
        let started = Instant::now();
        if let Some(held) = cached.as_ref().filter(|held| started < held.refresh_at) {
            return Ok(held.token.clone());
        }
        *cached = None;
        let fetched =
            tokio::time::timeout(inner.timeout, inner.fetch()).await.map_err(|_| {
                Failure::Connection {
                    detail: format!(
                        "no access token from {} within {} ms",
                        inner.label,
                        inner.timeout.as_millis()
                    ),
                }
            })??;
        let life = Duration::from_secs(fetched.1);
        let refresh_at = started + life.saturating_sub(inner.margin);
        *cached = Some(Cached { token: fetched.0.clone(), refresh_at });
        Ok(fetched.0)
    }

    /// Forgets `used` if it is still the cached token (Vertex refused it with a 401).
    pub(crate) async fn drop_token(&self, used: &Secret) {
        let mut cached = self.inner.cache.lock().await;
        if cached.as_ref().is_some_and(|held| held.token == *used) {
            tracing::debug!(source = %self.inner.label, "access token refused; dropped");
            *cached = None;
        }
    }
}

impl Inner {
    /// One fetch: the token and its lifetime in seconds.
    async fn fetch(&self) -> Result<(Secret, u64), Failure> {
        let mut headers = HeaderMap::new();
        let (method, endpoint, body) = match &self.source {
            Source::ServiceAccount { key_pair, email, key_id, token_uri, endpoint } => {
                let iat = rein_core::clock::unix_ms() / 1000;
                let jwt = assertion(key_pair, key_id.as_deref(), email, token_uri.as_str(), iat)?;
                let form = form_urlencoded::Serializer::new(String::new())
                    .append_pair("grant_type", JWT_BEARER_GRANT)
                    .append_pair("assertion", &jwt)
                    .finish();
                headers.insert(
                    CONTENT_TYPE,
                    HeaderValue::from_static("application/x-www-form-urlencoded"),
                );
                (Method::POST, endpoint, Bytes::from(form))
            }
            Source::Metadata { endpoint } => {
                headers.insert(
                    HeaderName::from_static("metadata-flavor"),
                    HeaderValue::from_static("Google"),
                );
                (Method::GET, endpoint, Bytes::new())
            }
        };
        let upstream =
            self.client.send(method, endpoint, &headers, body).await.map_err(|failure| {
                match failure {
                    Failure::Connection { detail } => Failure::Connection {
                        detail: format!("cannot reach {}: {detail}", self.label),
                    },
                    Failure::ClockFired { .. } => Failure::Connection {
                        detail: format!("cannot reach {}: connect timed out", self.label),
                    },
                    other => other,
                }
            })?;
        let mut body = Vec::new();
        let mut chunks = upstream.body;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|_| Failure::Connection {
                detail: format!("{} broke off its answer", self.label),
            })?;
            if body.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
                return Err(Failure::Malformed {
                    detail: format!(
                        "the answer of {} is larger than {MAX_TOKEN_RESPONSE_BYTES} bytes",
                        self.label
                    ),
                });
            }
            body.extend_from_slice(&chunk);
        }
        if !upstream.status.is_success() {
            return Err(self.refusal(upstream.status.as_u16(), &upstream.headers, &body));
        }
        let parsed: TokenResponse =
            serde_json::from_slice(&body).map_err(|_| Failure::Malformed {
                detail: format!("the answer of {} is not a token response", self.label),
            })?;
        match parsed.access_token.filter(|token| !token.is_empty()) {
            Some(token) => Ok((Secret::new(token), parsed.expires_in.unwrap_or(0))),
            None => Err(Failure::Malformed {
                detail: format!("the answer of {} holds no access_token", self.label),
            }),
        }
    }

    /// A token endpoint's error: OAuth's `{"error": "invalid_grant", "error_description"}`
    /// (the error as the type), a Google body, or text.
    fn refusal(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Failure {
        let json = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
        let (error_type, said) = match json.get("error") {
            Some(Value::String(error)) => {
                let description =
                    json.get("error_description").and_then(Value::as_str).unwrap_or("");
                (Some(error.clone()), format!("{error}: {description}"))
            }
            Some(Value::Object(error)) => (
                error.get("status").and_then(Value::as_str).map(str::to_owned),
                error.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
            ),
            _ => (None, String::from_utf8_lossy(&body[..body.len().min(256)]).trim().to_owned()),
        };
        let message = format!("{} refused the token request (HTTP {status}): {said}", self.label);
        let http = HttpError {
            status,
            error_type,
            code: None,
            message,
            retry_after: crate::retry_after(headers),
            should_retry: None,
            request_id: None,
        };
        Failure::Http { format: self.format, http }
    }
}
