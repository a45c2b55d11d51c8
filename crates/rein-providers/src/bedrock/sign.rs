//! SigV4 for Bedrock requests, through `aws-sigv4`: the request's method, URL, signed headers
//! (`host`, `content-type`) and body hash give the `authorization`, `x-amz-date` and, with
//! temporary credentials, `x-amz-security-token` headers. The secret key is read here only, to
//! hand it to the signer; the headers returned are marked sensitive by the caller.

use std::time::Duration;

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

use crate::secret::Secret;

/// The AWS credentials a Bedrock provider signs with.
#[derive(Clone)]
pub struct AwsCredentials {
    pub access_key_id: Secret,
    pub secret_access_key: Secret,
    /// Present with temporary (STS) credentials.
    pub session_token: Option<Secret>,
}

impl std::fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("session_token", &self.session_token.is_some())
            .finish_non_exhaustive()
    }
}

/// Where and when one request is signed.
#[derive(Debug, Clone, Copy)]
pub struct SigningScope<'a> {
    pub region: &'a str,
    /// The signing name: `bedrock` for Bedrock Runtime.
    pub service: &'a str,
    /// When the request is signed, since the Unix epoch.
    pub time: Duration,
}

/// The headers SigV4 adds to a request (`authorization`, `x-amz-date`, and
/// `x-amz-security-token` with a session token), in the signer's order. `headers` are the
/// headers to sign, `host` among them. Fails only when the URL or a header cannot be read.
// The signer takes a `SystemTime`; the time itself comes from the caller (rein's wall clock).
#[allow(clippy::disallowed_types)]
pub fn sigv4_headers(
    credentials: &AwsCredentials,
    scope: SigningScope<'_>,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Vec<(String, String)>, String> {
    let identity: Identity = Credentials::new(
        credentials.access_key_id.expose(),
        credentials.secret_access_key.expose(),
        credentials.session_token.as_ref().map(|token| token.expose().to_owned()),
        None,
        "rein",
    )
    .into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(scope.region)
        .name(scope.service)
        .time(std::time::UNIX_EPOCH + scope.time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|error| format!("signing parameters: {error}"))?
        .into();
    let signable =
        SignableRequest::new(method, url, headers.iter().copied(), SignableBody::Bytes(body))
            .map_err(|error| format!("request cannot be signed: {error}"))?;
    let (instructions, _signature) =
        sign(signable, &params).map_err(|error| format!("signing failed: {error}"))?.into_parts();
    Ok(instructions.headers().map(|(name, value)| (name.to_owned(), value.to_owned())).collect())
}
