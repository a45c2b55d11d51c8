//! Scrubbing what a cassette keeps of an exchange, so that no credential reaches the file.
//!
//! Two passes. By *name*: a credential header (`authorization`, `x-api-key`, `api-key`,
//! `proxy-authorization`, `cookie`, `set-cookie`, `openai-organization`, `openai-project`,
//! `anthropic-organization-id`, `x-goog-api-key`, and any header whose name contains `key`,
//! `token`, `secret` or `auth`) keeps its name and gets the value `[scrubbed]`, and so does a
//! query parameter whose name contains one of those words (or is `sig`, `signature`). By
//! *value*: every secret (the keys the recorder was given, the values of the headers and
//! parameters scrubbed by name, the token after `Bearer`, each cookie's value) is replaced
//! wherever else it occurs: bodies, paths, query strings (also percent-encoded) and other
//! headers. Values taken from headers are replaced only when at least
//! [`MIN_DERIVED_SECRET_LEN`] bytes long, so a short value (`1`, `true`) cannot garble a body;
//! the keys given explicitly always are.
//!
//! Rate-limit headers (`x-ratelimit-*`, `anthropic-ratelimit-*`, `ratelimit*`) name "tokens"
//! but hold counters, not credentials: they are kept. Organisation and project ids inside a
//! response body of a known shape are not parsed out: the header scrubbing plus the value
//! replacement cover them wherever the same id also appeared in a header.

/// What a scrubbed value becomes.
pub const SCRUBBED: &str = "[scrubbed]";

/// The shortest value taken from a header or parameter that is replaced elsewhere.
pub const MIN_DERIVED_SECRET_LEN: usize = 8;

/// Headers that are credentials or identify the account, by exact name.
const NAMED: [&str; 10] = [
    "authorization",
    "x-api-key",
    "api-key",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "openai-organization",
    "openai-project",
    "anthropic-organization-id",
    "x-goog-api-key",
];

/// Words that make any header or query parameter a secret.
const FRAGMENTS: [&str; 4] = ["key", "token", "secret", "auth"];

/// Whether a header's value is scrubbed, by its name (any case).
pub fn is_secret_header(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    if name.starts_with("x-ratelimit")
        || name.starts_with("anthropic-ratelimit")
        || name.starts_with("ratelimit")
    {
        return false;
    }
    NAMED.contains(&name.as_str()) || FRAGMENTS.iter().any(|word| name.contains(word))
}

/// Whether a query parameter's value is scrubbed, by its name (any case).
fn is_secret_param(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "sig" || name.contains("signature") || FRAGMENTS.iter().any(|word| name.contains(word))
}

/// The secrets one exchange is scrubbed of.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scrubber {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Vec<String>,
}

impl Scrubber {
    /// A scrubber for the keys given explicitly (empty ones are skipped).
    pub(crate) fn new<I, S>(secrets: I) -> Scrubber
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut scrubber = Scrubber::default();
        for secret in secrets {
            scrubber.add(secret.into(), 1);
        }
        scrubber
    }

    fn add(&mut self, secret: String, min_len: usize) {
        let secret = secret.trim().to_string();
        if secret.len() < min_len.max(1) || secret == SCRUBBED || self.secrets.contains(&secret) {
            return;
        }
        let encoded = percent_encode(&secret);
        self.secrets.push(secret);
        if !self.secrets.contains(&encoded) {
            self.secrets.push(encoded);
        }
        self.secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    }

    /// Learns the values of the credential headers among `headers`.
    pub(crate) fn learn_headers<'a>(
        &mut self,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) {
        for (name, value) in headers {
            if !is_secret_header(name) {
                continue;
            }
            self.add(value.to_string(), MIN_DERIVED_SECRET_LEN);
            let lower = name.to_ascii_lowercase();
            if lower == "cookie" || lower == "set-cookie" {
                let pairs: Vec<&str> = value.split(';').collect();
                // A set-cookie's attributes (path, domain, expiry) are not secrets.
                let take = if lower == "set-cookie" { 1 } else { pairs.len() };
                for pair in pairs.into_iter().take(take) {
                    if let Some((_, value)) = pair.split_once('=') {
                        self.add(value.to_string(), MIN_DERIVED_SECRET_LEN);
                    }
                }
            } else if let Some((_, token)) = value.trim().split_once(' ') {
                // `Bearer <token>`, `Basic <credentials>`.
                self.add(token.to_string(), MIN_DERIVED_SECRET_LEN);
            }
        }
    }

    /// Learns the values of the secret parameters of a path's query string.
    pub(crate) fn learn_query(&mut self, path_and_query: &str) {
        let Some((_, query)) = path_and_query.split_once('?') else { return };
        for pair in query.split('&') {
            if let Some((name, value)) = pair.split_once('=')
                && is_secret_param(name)
            {
                self.add(percent_decode(value), MIN_DERIVED_SECRET_LEN);
                self.add(value.to_string(), MIN_DERIVED_SECRET_LEN);
            }
        }
    }

    /// `text` with every secret replaced.
    pub(crate) fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), SCRUBBED);
            }
        }
        out
    }

    /// `bytes` with every secret replaced.
    pub(crate) fn bytes(&self, bytes: &[u8]) -> Vec<u8> {
        let mut out = bytes.to_vec();
        for secret in &self.secrets {
            out = replace_all(&out, secret.as_bytes(), SCRUBBED.as_bytes());
        }
        out
    }

    /// A path with its query: secret parameters by name, then every secret by value.
    pub(crate) fn path(&self, path_and_query: &str) -> String {
        let scrubbed = match path_and_query.split_once('?') {
            None => path_and_query.to_string(),
            Some((path, query)) => {
                let pairs: Vec<String> = query
                    .split('&')
                    .map(|pair| match pair.split_once('=') {
                        Some((name, _)) if is_secret_param(name) => format!("{name}={SCRUBBED}"),
                        _ => pair.to_string(),
                    })
                    .collect();
                format!("{path}?{}", pairs.join("&"))
            }
        };
        self.text(&scrubbed)
    }

    /// Headers as a cassette keeps them: credential headers by name, the rest by value.
    pub(crate) fn headers<'a>(
        &self,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<(String, String)> {
        headers
            .into_iter()
            .map(|(name, value)| {
                let value =
                    if is_secret_header(name) { SCRUBBED.to_string() } else { self.text(value) };
                (name.to_string(), value)
            })
            .collect()
    }
}

fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return haystack.to_vec();
    }
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

/// Percent-encodes every byte outside RFC 3986's unreserved set.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Decodes `%XX` escapes and `+` (as a space); an invalid escape is kept as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            byte => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_headers_are_scrubbed_by_name_and_rate_limits_kept() {
        for name in [
            "Authorization",
            "x-api-key",
            "api-key",
            "cookie",
            "set-cookie",
            "openai-organization",
            "openai-project",
            "anthropic-organization-id",
            "x-goog-api-key",
            "x-my-session-token",
            "x-client-secret",
            "x-amz-security-token",
        ] {
            assert!(is_secret_header(name), "{name}");
        }
        for name in [
            "content-type",
            "x-request-id",
            "x-ratelimit-remaining-tokens",
            "anthropic-ratelimit-tokens-limit",
            "retry-after",
        ] {
            assert!(!is_secret_header(name), "{name}");
        }
    }

    #[test]
    fn values_of_scrubbed_headers_and_parameters_are_replaced_everywhere() {
        let mut scrubber = Scrubber::new(["sk-explicit"]);
        scrubber.learn_headers([
            ("authorization", "Bearer sk-from-header-123"),
            ("cookie", "session=cookie-value-456; theme=dark"),
            ("x-api-key", "short"),
        ]);
        scrubber.learn_query("/v1/models?key=query%2Bsecret%2F789&limit=10");
        let body =
            "a sk-explicit b sk-from-header-123 c cookie-value-456 d query+secret/789 e short";
        assert_eq!(
            scrubber.text(body),
            "a [scrubbed] b [scrubbed] c [scrubbed] d [scrubbed] e short",
            "a derived value under 8 bytes is not replaced in bodies"
        );
        assert_eq!(
            scrubber.path("/v1/models?key=query%2Bsecret%2F789&limit=10&user=sk-explicit"),
            "/v1/models?key=[scrubbed]&limit=10&user=[scrubbed]"
        );
        let headers = scrubber.headers([
            ("x-api-key", "short"),
            ("x-echo", "saw sk-from-header-123"),
            ("content-type", "application/json"),
        ]);
        assert_eq!(
            headers,
            vec![
                ("x-api-key".to_string(), SCRUBBED.to_string()),
                ("x-echo".to_string(), "saw [scrubbed]".to_string()),
                ("content-type".to_string(), "application/json".to_string()),
            ]
        );
        assert_eq!(scrubber.bytes(b"\xff sk-explicit \xfe"), b"\xff [scrubbed] \xfe".to_vec());
    }

    #[test]
    fn a_longer_secret_is_replaced_whole_before_one_it_contains() {
        let scrubber = Scrubber::new(["abcdefgh", "abcdefgh-ijkl"]);
        assert_eq!(scrubber.text("x abcdefgh-ijkl y abcdefgh"), "x [scrubbed] y [scrubbed]");
    }
}
