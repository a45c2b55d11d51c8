//! Google Vertex AI: the model paths of both publishers, and the OAuth side. Claude is
//! `POST /v1/projects/{p}/locations/{l}/publishers/anthropic/models/{model}:rawPredict`
//! (`:streamRawPredict`), a Messages body without `model` and with `anthropic_version`
//! (`vertex-2023-10-16`), answered as Anthropic answers; Gemini is
//! `.../publishers/google/models/{model}:generateContent` (`:streamGenerateContent`),
//! answered as the Gemini API answers. Errors are Google's bodies for both, but for Claude's
//! `overloaded` (Anthropic's 529 `overloaded_error`, which Vertex passes through).
//!
//! Every model request needs `Authorization: Bearer <token>` with a token this simulator
//! issued and that has not expired (on tokio's clock): otherwise a 401 `UNAUTHENTICATED`.
//! Tokens come from `POST /token`, the `jwt-bearer` grant, whose assertion must be RS256-signed
//! by the test key ([`test_service_account`], a throwaway key pair that signs nothing real)
//! with `iss` its `client_email`, the cloud-platform `scope`, `aud` this `/token` URL and an
//! `exp` at most an hour after `iat`; or from the metadata server's
//! `GET /computeMetadata/v1/instance/service-accounts/default/token`, which refuses a request
//! without `Metadata-Flavor: Google`. Tokens live [`DEFAULT_TOKEN_LIFETIME`] unless told
//! otherwise ([`crate::SimHandle::set_token_lifetime`]).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::{HeaderMap, StatusCode};
use ring::signature::{KeyPair as _, RSA_PKCS1_2048_8192_SHA256, RsaKeyPair, UnparsedPublicKey};
use rustls_pki_types::PrivatePkcs8KeyDer;
use rustls_pki_types::pem::PemObject;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::fault::{ErrorFault, ErrorKind};
use crate::wire::WireError;

/// The test key pair's private half, PKCS#8 PEM. For tests and drills only.
const TEST_KEY_PEM: &str = include_str!("vertex-TEST-ONLY-key.pem");
/// The test service account's email.
pub const TEST_CLIENT_EMAIL: &str = "rein-sim@rein-sim-test.iam.gserviceaccount.com";
/// The test key's id (`kid`).
pub const TEST_KEY_ID: &str = "rein-sim-test-key";
/// How long an issued token lives unless set otherwise: an hour, as Google's do.
pub const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);
const SCOPE: &str = "https://www.googleapis.com/auth/cloud-platform";
const GRANT: &str = "urn:ietf:params:oauth:grant-type:jwt-bearer";
/// The metadata server's token path.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";

/// A service-account key file (JSON) for the simulator's test account, with `token_uri`: what a
/// Vertex provider pointed at this simulator reads. The key is a throwaway test key.
pub fn test_service_account(token_uri: &str) -> String {
    json!({
        "type": "service_account",
        "project_id": "rein-sim-test",
        "private_key_id": TEST_KEY_ID,
        "private_key": TEST_KEY_PEM,
        "client_email": TEST_CLIENT_EMAIL,
        "client_id": "100000000000000000001",
        "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": token_uri,
        "universe_domain": "googleapis.com"
    })
    .to_string()
}

/// One token handed out: by which grant, and the assertion's claims for the key grant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TokenGrant {
    /// `jwt-bearer` or `metadata`.
    pub grant: &'static str,
    /// The assertion's claims (`jwt-bearer` only; `Null` otherwise).
    pub claims: Value,
    /// The JWT header (`alg`, `typ`, `kid`).
    pub header: Value,
}

/// Issued tokens and the grants that made them.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    state: Mutex<TokenState>,
}

#[derive(Debug, Default)]
struct TokenState {
    issued: HashMap<String, Instant>,
    grants: Vec<TokenGrant>,
    lifetime: Option<Duration>,
    next: u64,
}

impl Tokens {
    fn state(&self) -> std::sync::MutexGuard<'_, TokenState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn set_lifetime(&self, lifetime: Duration) {
        self.state().lifetime = Some(lifetime);
    }

    /// Makes every token issued so far expired.
    pub(crate) fn expire_all(&self) {
        let now = Instant::now();
        self.state().issued.values_mut().for_each(|expiry| *expiry = now);
    }

    pub(crate) fn grants(&self) -> Vec<TokenGrant> {
        self.state().grants.clone()
    }

    fn issue(&self, grant: TokenGrant) -> Value {
        let mut state = self.state();
        let lifetime = state.lifetime.unwrap_or(DEFAULT_TOKEN_LIFETIME);
        state.next += 1;
        let token = format!("ya29.sim-{:04}-{}", state.next, "x".repeat(24));
        state.issued.insert(token.clone(), Instant::now() + lifetime);
        state.grants.push(grant);
        json!({"access_token": token, "expires_in": lifetime.as_secs(), "token_type": "Bearer"})
    }

    /// Whether `authorization` carries a live token this simulator issued.
    pub(crate) fn valid(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization.and_then(|value| value.strip_prefix("Bearer ")) else {
            return false;
        };
        self.state().issued.get(token).is_some_and(|expiry| Instant::now() < *expiry)
    }
}

/// A model path: the publisher, the model (percent-decoded) and the method.
pub(crate) fn route(path: &str) -> Option<(&str, String, &str)> {
    let rest = path.strip_prefix("/v1/projects/")?;
    let mut parts = rest.splitn(7, '/');
    let (_project, locations, _location, publishers, publisher, models, tail) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if (locations, publishers, models) != ("locations", "publishers", "models") {
        return None;
    }
    let (model, method) = tail.rsplit_once(':')?;
    Some((publisher, crate::gemini::percent_decoded(model), method))
}

/// The 401 a missing, unknown or expired token gets.
pub(crate) fn unauthenticated(expired: bool) -> WireError {
    let reason = if expired { "ACCESS_TOKEN_EXPIRED" } else { "CREDENTIALS_MISSING" };
    WireError {
        status: 401,
        body: json!({"error": {
            "code": 401,
            "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
            "status": "UNAUTHENTICATED",
            "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": reason,
                "domain": "googleapis.com",
                "metadata": {"service": "aiplatform.googleapis.com"}
            }]
        }}),
        headers: Vec::new(),
    }
}

/// The error Vertex sends for this fault: Google's body, with Vertex's own wording where it
/// differs from the Gemini API's (its 429, its 401, its 404 naming the publisher model).
pub(crate) fn error(fault: &ErrorFault, model: &str) -> WireError {
    let mut error = crate::gemini::error(fault, model);
    let rewrite = |error: &mut WireError, status: u16, rpc: &str, message: String| {
        error.status = status;
        error.body["error"]["code"] = json!(status);
        error.body["error"]["status"] = json!(rpc);
        error.body["error"]["message"] = json!(message);
        // Keep only a RetryInfo: the Gemini API's quota and key details are not Vertex's.
        let kept: Vec<Value> = error.body["error"]["details"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["@type"] == "type.googleapis.com/google.rpc.RetryInfo")
            .cloned()
            .collect();
        match kept.is_empty() {
            true => drop(error.body["error"].as_object_mut().map(|e| e.remove("details"))),
            false => error.body["error"]["details"] = Value::Array(kept),
        }
    };
    match fault.kind {
        ErrorKind::RateLimit => rewrite(
            &mut error,
            429,
            "RESOURCE_EXHAUSTED",
            "Resource exhausted. Please try again later. Please refer to \
             https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
                .to_owned(),
        ),
        ErrorKind::Unauthorized => return unauthenticated(false),
        ErrorKind::NotFound => rewrite(
            &mut error,
            404,
            "NOT_FOUND",
            format!(
                "Publisher Model `{model}` was not found or your project does not have access to it."
            ),
        ),
        _ => {}
    }
    if let Some(status) = fault.status {
        error.status = status;
    }
    error
}

fn oauth_error(status: StatusCode, error: &str, description: &str) -> (StatusCode, Value) {
    (status, json!({"error": error, "error_description": description}))
}

/// `POST /token`: the `jwt-bearer` grant, checked as Google checks it.
pub(crate) fn token(tokens: &Tokens, headers: &HeaderMap, body: &[u8]) -> (StatusCode, Value) {
    let form: HashMap<String, String> = form_pairs(body);
    if form.get("grant_type").map(String::as_str) != Some(GRANT) {
        let got = form.get("grant_type").cloned().unwrap_or_default();
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            &format!("Invalid grant_type: {got}"),
        );
    }
    let Some(assertion) = form.get("assertion") else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "Missing required parameter: assertion",
        );
    };
    let host = headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    match check_assertion(assertion, &format!("http://{host}/token")) {
        Ok((header, claims)) => {
            (StatusCode::OK, tokens.issue(TokenGrant { grant: "jwt-bearer", claims, header }))
        }
        Err(description) => oauth_error(StatusCode::BAD_REQUEST, "invalid_grant", description),
    }
}

/// `GET .../service-accounts/default/token` on the metadata server.
pub(crate) fn metadata_token(tokens: &Tokens, headers: &HeaderMap) -> (StatusCode, Value) {
    let flavor = headers.get("metadata-flavor").and_then(|v| v.to_str().ok());
    if flavor != Some("Google") {
        return (StatusCode::FORBIDDEN, json!("Missing Metadata-Flavor:Google header."));
    }
    let grant = TokenGrant { grant: "metadata", claims: Value::Null, header: Value::Null };
    (StatusCode::OK, tokens.issue(grant))
}

fn form_pairs(body: &[u8]) -> HashMap<String, String> {
    form_urlencoded::parse(body).map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

/// The assertion's header and claims, or Google's description of what is wrong with it.
fn check_assertion(jwt: &str, audience: &str) -> Result<(Value, Value), &'static str> {
    let mut parts = jwt.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("Invalid JWT: Token must be a short-lived token and in a reasonable timeframe");
    };
    let decode = |part: &str| -> Option<Value> {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
    };
    let (Some(header_json), Some(claims_json), Ok(signature_bytes)) =
        (decode(header), decode(claims), URL_SAFE_NO_PAD.decode(signature))
    else {
        return Err("Invalid JWT: the assertion is not base64url JSON.");
    };
    if header_json["alg"] != "RS256" {
        return Err("Invalid JWT Signature.");
    }
    let public = test_public_key().ok_or("Invalid JWT Signature.")?;
    let signed = format!("{header}.{claims}");
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public)
        .verify(signed.as_bytes(), &signature_bytes)
        .map_err(|_| "Invalid JWT Signature.")?;
    if claims_json["iss"] != TEST_CLIENT_EMAIL {
        return Err("Invalid grant: account not found");
    }
    if claims_json["aud"] != audience {
        return Err("Invalid JWT: Failed audience check.");
    }
    let scopes = claims_json["scope"].as_str().unwrap_or("");
    if !scopes.split(' ').any(|scope| scope == SCOPE) {
        return Err("Invalid OAuth scope or ID token audience provided.");
    }
    let now = rein_core::clock::unix_ms() / 1000;
    let (Some(iat), Some(exp)) = (claims_json["iat"].as_u64(), claims_json["exp"].as_u64()) else {
        return Err("Invalid JWT: Token must be a short-lived token and in a reasonable timeframe");
    };
    if exp <= iat || exp - iat > 3600 || iat > now + 300 || exp + 300 < now {
        return Err(
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim.",
        );
    }
    Ok((header_json, claims_json))
}

fn test_public_key() -> Option<Vec<u8>> {
    let der = PrivatePkcs8KeyDer::from_pem_slice(TEST_KEY_PEM.as_bytes()).ok()?;
    let pair = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).ok()?;
    Some(pair.public_key().as_ref().to_vec())
}

/// The Anthropic publisher's body as the rest of the simulator reads it (`model` from the
/// path), or the 400 Vertex answers: `anthropic_version` is required, `model` is not allowed.
pub(crate) fn anthropic_body(body: &[u8], model: &str, stream: bool) -> Result<Value, Value> {
    let refuse = |message: &str| json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
    let Ok(Value::Object(mut object)) = serde_json::from_slice::<Value>(body) else {
        return Err(refuse("The request body is not valid JSON."));
    };
    match object.get("anthropic_version").and_then(Value::as_str) {
        Some("vertex-2023-10-16") => {}
        Some(_) => return Err(refuse("anthropic_version: Input should be 'vertex-2023-10-16'")),
        None => return Err(refuse("anthropic_version: Field required")),
    }
    if object.contains_key("model") {
        return Err(refuse("model: Extra inputs are not permitted"));
    }
    object.remove("anthropic_version");
    object.insert("model".into(), json!(model));
    if stream {
        object.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(object))
}
