//! The fault spec language: what a drill or a test asks the simulator to do to one request.
//!
//! A spec is a *script* of one or more steps separated by `,`; the n-th request with the same
//! sequence key gets step n, and later requests repeat the last step. A step is one or more
//! faults joined by `+`, and a fault is `name` or `name:key=value;key=value`. Parsing checks
//! every name, parameter and combination up front so that a typo in a drill fails loudly with
//! an error naming the bad part, instead of silently serving healthy answers.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD_INDIFFERENT;

/// A parsed fault spec: the steps of a script (a single fault is a script of one step).
#[derive(Debug, Clone, PartialEq)]
pub struct FaultSpec {
    text: String,
    steps: Vec<Step>,
}

impl FaultSpec {
    /// Parses a spec such as `529`, `429:retry_after=2`, `cut:after=5+token_delay:ms=10` or
    /// the script `529,529,ok`.
    pub fn parse(text: &str) -> Result<FaultSpec, FaultSpecError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(FaultSpecError::new(text, "the spec is empty"));
        }
        let steps = text
            .split(',')
            .map(|step| {
                Step::parse(step.trim()).map_err(|reason| FaultSpecError::new(text, reason))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FaultSpec { text: text.to_owned(), steps })
    }

    /// The spec as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// True for a script of more than one step.
    pub fn is_script(&self) -> bool {
        self.steps.len() > 1
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The step for the `n`-th request (0-based) of one sequence: later requests repeat the
    /// last step.
    pub fn step(&self, n: usize) -> &Step {
        let last = self.steps.len().saturating_sub(1);
        &self.steps[n.min(last)]
    }
}

impl std::str::FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(text: &str) -> Result<FaultSpec, FaultSpecError> {
        FaultSpec::parse(text)
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A spec that could not be parsed: the whole spec and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad fault spec `{spec}`: {reason}")]
pub struct FaultSpecError {
    pub spec: String,
    pub reason: String,
}

impl FaultSpecError {
    fn new(spec: &str, reason: impl Into<String>) -> Self {
        Self { spec: spec.to_owned(), reason: reason.into() }
    }
}

/// What one request gets: an outcome plus timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    text: String,
    pub outcome: Outcome,
    /// Wait before the first content token (streams) or before the response (otherwise).
    pub slow_first_token_ms: Option<u64>,
    /// Wait between two content tokens.
    pub token_delay_ms: Option<u64>,
}

impl Step {
    /// The healthy step, as chosen when no fault applies.
    pub fn healthy() -> Step {
        Step {
            text: "ok".to_owned(),
            outcome: Outcome::Answer { shape: None, transport: None, say: None },
            slow_first_token_ms: None,
            token_delay_ms: None,
        }
    }

    /// The step as written in its spec.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    fn parse(text: &str) -> Result<Step, String> {
        if text.is_empty() {
            return Err("a script step is empty (two commas in a row, or a trailing comma?)".into());
        }
        let mut shape: Option<Shape> = None;
        let mut transport: Option<Transport> = None;
        let mut terminal: Option<Outcome> = None;
        let mut say: Option<String> = None;
        let mut slow_first_token_ms = None;
        let mut token_delay_ms = None;
        let mut saw_ok = false;
        for part in text.split('+') {
            let raw = RawFault::parse(part.trim())?;
            match parse_fault(&raw)? {
                Parsed::Ok => saw_ok = true,
                Parsed::Shape(s) => set_once(&mut shape, s, &raw.name, "answer shape")?,
                Parsed::Transport(t) => set_once(&mut transport, t, &raw.name, "stream fault")?,
                Parsed::Terminal(o) => set_once(&mut terminal, o, &raw.name, "error")?,
                Parsed::Say(text) => set_once(&mut say, text, &raw.name, "answer text")?,
                Parsed::SlowFirstToken(ms) => {
                    set_once(&mut slow_first_token_ms, ms, &raw.name, "first-token delay")?
                }
                Parsed::TokenDelay(ms) => {
                    set_once(&mut token_delay_ms, ms, &raw.name, "token delay")?
                }
            }
        }
        let outcome = match terminal {
            Some(outcome) => {
                if saw_ok || shape.is_some() || transport.is_some() || say.is_some() {
                    return Err(format!(
                        "`{text}` combines an error or connection fault with an answer; \
                         only slow_first_token may be added to it"
                    ));
                }
                if token_delay_ms.is_some() {
                    return Err(format!(
                        "`{text}`: token_delay has no tokens to delay on an error or connection fault"
                    ));
                }
                outcome
            }
            None => Outcome::Answer { shape, transport, say },
        };
        Ok(Step { text: text.to_owned(), outcome, slow_first_token_ms, token_delay_ms })
    }
}

fn set_once<T>(slot: &mut Option<T>, value: T, name: &str, what: &str) -> Result<(), String> {
    if slot.is_some() {
        return Err(format!("`{name}` adds a second {what} to one step; use at most one"));
    }
    *slot = Some(value);
    Ok(())
}

/// What happens to a request, apart from timing.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// A 200 answer, possibly shaped or broken in transit. `say` replaces the healthy answer's
    /// text with exactly this text (`say:b64=<base64url>`); shapes and stream faults still apply
    /// to it (`max_tokens` cuts it, `refusal` makes it the refusal's words).
    Answer { shape: Option<Shape>, transport: Option<Transport>, say: Option<String> },
    /// An error status with the provider's error body.
    Error(ErrorFault),
    /// Close the connection (TCP reset) before any response header.
    Reset,
    /// Accept the request and never answer, until the client goes away.
    Hang,
}

/// A change to what the healthy answer says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Cut at the token ceiling with `length` / `max_tokens`.
    MaxTokens,
    /// The model declines.
    Refusal,
    /// The JSON answer wrapped in a ```json fence.
    CodeFence,
    /// A 400 when the last message is an assistant prefill, healthy otherwise.
    RejectPrefill,
}

/// A way the answer breaks on its way to the client. Positions count content tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Close the connection after `after` tokens, with no stop reason or terminator.
    Cut { after: u32 },
    /// Send `after` tokens, then nothing more while the client stays.
    Stall { after: u32 },
    /// After `after` tokens, one data line that is not JSON; then the rest as usual.
    Malformed { after: u32 },
    /// A complete answer with its stop reason but without `[DONE]` / `message_stop`.
    NoDone,
    /// After `after` tokens, the provider's in-stream error event.
    StreamError { after: u32 },
}

/// An HTTP error response and the pushback headers that come with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ErrorFault {
    pub kind: ErrorKind,
    /// `retry-after` header value, seconds as written (may be fractional).
    pub retry_after: Option<String>,
    /// `retry-after-ms` header value.
    pub retry_after_ms: Option<u64>,
    /// `x-should-retry` header value.
    pub should_retry: Option<bool>,
    /// Overrides the fault's usual status (e.g. `spend_cap:status=400`).
    pub status: Option<u16>,
    /// Free text carried in the message, for faults that name a reason.
    pub reason: Option<String>,
    /// Context-length numbers for `context_length`.
    pub max_tokens: Option<u64>,
    pub tokens: Option<u64>,
    /// The wait a rate-limit message names ("Please try again in 20s"), as OpenAI writes it
    /// (`429:try_again=20s`); `1s` when not given.
    pub try_again: Option<String>,
}

impl ErrorFault {
    /// The fault with no extra headers or overrides.
    pub fn of(kind: ErrorKind) -> Self {
        Self {
            kind,
            retry_after: None,
            retry_after_ms: None,
            should_retry: None,
            status: None,
            reason: None,
            max_tokens: None,
            tokens: None,
            try_again: None,
        }
    }
}

/// The error faults, named after what the provider would be telling the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 429 rate limit (`429`).
    RateLimit,
    /// Out of credits: OpenAI 429 `insufficient_quota`, Anthropic 400 credit balance.
    InsufficientQuota,
    /// A spend or usage cap that waiting won't lift (429).
    SpendCap,
    /// Anthropic-style overload (`529`).
    Overloaded,
    /// OpenAI-style overload (`503`).
    Unavailable,
    /// `500`.
    Internal,
    /// `408`.
    Timeout,
    /// `409`.
    Conflict,
    /// 400: the prompt exceeds the model's context window.
    ContextLength,
    /// 400: rejected by the provider's content policy.
    ContentPolicy,
    /// `401`.
    Unauthorized,
    /// `403`.
    Forbidden,
    /// `404`.
    NotFound,
    /// `413`.
    TooLarge,
    /// 400: an assistant prefill on a model that does not take one (from `reject_prefill`).
    PrefillRejected,
    /// 400: the simulator could not use the request (bad JSON, bad spec); carries its message.
    BadRequest,
}

impl ErrorKind {
    /// The status this fault usually has.
    pub fn default_status(self) -> u16 {
        match self {
            ErrorKind::RateLimit | ErrorKind::InsufficientQuota | ErrorKind::SpendCap => 429,
            ErrorKind::Overloaded => 529,
            ErrorKind::Unavailable => 503,
            ErrorKind::Internal => 500,
            ErrorKind::Timeout => 408,
            ErrorKind::Conflict => 409,
            ErrorKind::ContextLength
            | ErrorKind::ContentPolicy
            | ErrorKind::PrefillRejected
            | ErrorKind::BadRequest => 400,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Forbidden => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::TooLarge => 413,
        }
    }
}

/// A fault as written, before its name is looked up.
struct RawFault {
    name: String,
    params: Vec<(String, String)>,
}

impl RawFault {
    fn parse(text: &str) -> Result<RawFault, String> {
        if text.is_empty() {
            return Err("an empty fault between `+` signs".into());
        }
        let (name, rest) = match text.split_once(':') {
            Some((name, rest)) => (name.trim(), Some(rest)),
            None => (text, None),
        };
        let mut params = Vec::new();
        if let Some(rest) = rest {
            for param in rest.split(';').map(str::trim).filter(|p| !p.is_empty()) {
                let Some((key, value)) = param.split_once('=') else {
                    return Err(format!("`{name}`: parameter `{param}` is not `key=value`"));
                };
                let key = key.trim().to_owned();
                if params.iter().any(|(k, _)| *k == key) {
                    return Err(format!("`{name}`: parameter `{key}` is given twice"));
                }
                params.push((key, value.trim().to_owned()));
            }
        }
        Ok(RawFault { name: name.to_owned(), params })
    }
}

enum Parsed {
    Ok,
    Shape(Shape),
    Transport(Transport),
    Terminal(Outcome),
    SlowFirstToken(u64),
    TokenDelay(u64),
    Say(String),
}

/// The text of `say:b64=<...>`: base64url (RFC 4648 §5, `-` and `_`), padding optional, of
/// UTF-8 text. The URL-safe alphabet has none of the spec's separators (`,` `+` `;` `:`).
fn decode_say(encoded: &str) -> Result<String, String> {
    let bytes = URL_SAFE_NO_PAD_INDIFFERENT
        .decode(encoded)
        .map_err(|e| format!("`say`: b64 is not base64url ({e}); encode the answer text with the URL-safe alphabet (`-`, `_`)"))?;
    String::from_utf8(bytes).map_err(|_| "`say`: b64 does not decode to UTF-8 text".to_string())
}

/// The fault spec step `say:b64=<...>` that answers exactly `text`, for scripts and `sim:`
/// models: `format!("sim:{},{}", say_spec("bad"), say_spec("good"))`.
pub fn say_spec(text: &str) -> String {
    format!("say:b64={}", URL_SAFE_NO_PAD_INDIFFERENT.encode(text))
}

/// Every fault name the simulator knows, for error messages.
pub const FAULT_NAMES: &[&str] = &[
    "ok",
    "429",
    "insufficient_quota",
    "spend_cap",
    "529",
    "503",
    "500",
    "408",
    "409",
    "context_length",
    "content_policy",
    "401",
    "403",
    "404",
    "413",
    "reset",
    "hang",
    "slow_first_token",
    "token_delay",
    "cut",
    "stall",
    "malformed",
    "no_done",
    "stream_error",
    "max_tokens",
    "refusal",
    "code_fence",
    "reject_prefill",
    "say",
];

fn parse_fault(raw: &RawFault) -> Result<Parsed, String> {
    let name = raw.name.as_str();
    let params = Params { fault: name, params: &raw.params };
    let error_kind = match name {
        "429" => Some(ErrorKind::RateLimit),
        "insufficient_quota" => Some(ErrorKind::InsufficientQuota),
        "spend_cap" => Some(ErrorKind::SpendCap),
        "529" => Some(ErrorKind::Overloaded),
        "503" => Some(ErrorKind::Unavailable),
        "500" => Some(ErrorKind::Internal),
        "408" => Some(ErrorKind::Timeout),
        "409" => Some(ErrorKind::Conflict),
        "context_length" => Some(ErrorKind::ContextLength),
        "content_policy" => Some(ErrorKind::ContentPolicy),
        "401" => Some(ErrorKind::Unauthorized),
        "403" => Some(ErrorKind::Forbidden),
        "404" => Some(ErrorKind::NotFound),
        "413" => Some(ErrorKind::TooLarge),
        _ => None,
    };
    if let Some(kind) = error_kind {
        return parse_error_fault(kind, &params).map(|e| Parsed::Terminal(Outcome::Error(e)));
    }
    let parsed = match name {
        "ok" => {
            params.only(&[])?;
            Parsed::Ok
        }
        "reset" => {
            params.only(&[])?;
            Parsed::Terminal(Outcome::Reset)
        }
        "hang" => {
            params.only(&[])?;
            Parsed::Terminal(Outcome::Hang)
        }
        "slow_first_token" => {
            params.only(&["ms"])?;
            Parsed::SlowFirstToken(params.required_u64("ms")?)
        }
        "token_delay" => {
            params.only(&["ms"])?;
            Parsed::TokenDelay(params.required_u64("ms")?)
        }
        "cut" => Parsed::Transport(Transport::Cut { after: params.after()? }),
        "stall" => Parsed::Transport(Transport::Stall { after: params.after()? }),
        "malformed" => Parsed::Transport(Transport::Malformed { after: params.after()? }),
        "stream_error" => Parsed::Transport(Transport::StreamError { after: params.after()? }),
        "no_done" => {
            params.only(&[])?;
            Parsed::Transport(Transport::NoDone)
        }
        "max_tokens" => {
            params.only(&[])?;
            Parsed::Shape(Shape::MaxTokens)
        }
        "refusal" => {
            params.only(&[])?;
            Parsed::Shape(Shape::Refusal)
        }
        "code_fence" => {
            params.only(&[])?;
            Parsed::Shape(Shape::CodeFence)
        }
        "reject_prefill" => {
            params.only(&[])?;
            Parsed::Shape(Shape::RejectPrefill)
        }
        "say" => {
            params.only(&["b64"])?;
            let Some(encoded) = params.get("b64") else {
                return Err(
                    "`say` needs `b64=<the answer text, base64url-encoded>`, e.g. `say:b64=aGk`"
                        .into(),
                );
            };
            Parsed::Say(decode_say(encoded)?)
        }
        other => {
            return Err(format!(
                "unknown fault `{other}`; known faults: {}",
                FAULT_NAMES.join(", ")
            ));
        }
    };
    Ok(parsed)
}

fn parse_error_fault(kind: ErrorKind, params: &Params<'_>) -> Result<ErrorFault, String> {
    let mut allowed = vec!["retry_after", "retry_after_ms", "should_retry", "status"];
    match kind {
        ErrorKind::ContextLength => allowed.extend(["max", "tokens"]),
        ErrorKind::ContentPolicy => allowed.push("reason"),
        ErrorKind::RateLimit => allowed.push("try_again"),
        _ => {}
    }
    params.only(&allowed)?;
    let mut fault = ErrorFault::of(kind);
    if let Some(value) = params.get("try_again") {
        let shaped = !value.is_empty()
            && value.chars().all(|c| c.is_ascii_digit() || ".hms".contains(c))
            && value.ends_with(['s', 'm', 'h']);
        if !shaped {
            return Err(format!(
                "`{}`: try_again is a wait as OpenAI writes it (`20s`, `1.5s`, `6ms`, `1m30s`), not `{value}`",
                params.fault
            ));
        }
        fault.try_again = Some(value.to_owned());
    }
    if let Some(value) = params.get("retry_after") {
        match value.parse::<f64>() {
            Ok(secs) if secs.is_finite() && secs >= 0.0 => {
                fault.retry_after = Some(value.to_owned())
            }
            _ => {
                return Err(format!(
                    "`{}`: retry_after must be a non-negative number of seconds, not `{value}`",
                    params.fault
                ));
            }
        }
    }
    fault.retry_after_ms = params.optional_u64("retry_after_ms")?;
    if let Some(value) = params.get("should_retry") {
        fault.should_retry = Some(match value {
            "true" => true,
            "false" => false,
            _ => {
                return Err(format!(
                    "`{}`: should_retry must be `true` or `false`, not `{value}`",
                    params.fault
                ));
            }
        });
    }
    if let Some(status) = params.optional_u64("status")? {
        if !(400..=599).contains(&status) {
            return Err(format!(
                "`{}`: status must be an error status (400-599), not {status}",
                params.fault
            ));
        }
        fault.status = Some(status as u16);
    }
    if let Some(reason) = params.get("reason") {
        fault.reason = Some(reason.to_owned());
    }
    fault.max_tokens = params.optional_u64("max")?;
    fault.tokens = params.optional_u64("tokens")?;
    Ok(fault)
}

struct Params<'a> {
    fault: &'a str,
    params: &'a [(String, String)],
}

impl Params<'_> {
    fn only(&self, allowed: &[&str]) -> Result<(), String> {
        for (key, _) in self.params {
            if !allowed.contains(&key.as_str()) {
                return Err(if allowed.is_empty() {
                    format!("`{}` takes no parameters, but was given `{key}`", self.fault)
                } else {
                    format!(
                        "`{}` has no parameter `{key}`; it takes {}",
                        self.fault,
                        allowed.join(", ")
                    )
                });
            }
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn optional_u64(&self, key: &str) -> Result<Option<u64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => value.parse::<u64>().map(Some).map_err(|_| {
                format!("`{}`: {key} must be a whole number, not `{value}`", self.fault)
            }),
        }
    }

    fn required_u64(&self, key: &str) -> Result<u64, String> {
        self.optional_u64(key)?.ok_or_else(|| {
            format!("`{}` needs `{key}=<n>`, e.g. `{}:{key}=100`", self.fault, self.fault)
        })
    }

    fn after(&self) -> Result<u32, String> {
        self.only(&["after"])?;
        let after = self.required_u64("after")?;
        u32::try_from(after).map_err(|_| format!("`{}`: after={after} is too large", self.fault))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_faults_parse() {
        let spec = FaultSpec::parse("529").unwrap();
        assert!(!spec.is_script());
        assert!(matches!(
            spec.step(0).outcome,
            Outcome::Error(ErrorFault { kind: ErrorKind::Overloaded, .. })
        ));
        let spec = FaultSpec::parse("429:retry_after=1.5").unwrap();
        let Outcome::Error(e) = &spec.step(0).outcome else { panic!() };
        assert_eq!(e.retry_after.as_deref(), Some("1.5"));
        let spec = FaultSpec::parse("ok").unwrap();
        assert_eq!(
            spec.step(0).outcome,
            Outcome::Answer { shape: None, transport: None, say: None }
        );
    }

    #[test]
    fn combined_faults_parse() {
        let spec = FaultSpec::parse("cut:after=5+token_delay:ms=10+slow_first_token:ms=7").unwrap();
        let step = spec.step(0);
        assert_eq!(step.token_delay_ms, Some(10));
        assert_eq!(step.slow_first_token_ms, Some(7));
        assert_eq!(
            step.outcome,
            Outcome::Answer {
                shape: None,
                transport: Some(Transport::Cut { after: 5 }),
                say: None
            }
        );
        let spec = FaultSpec::parse("529+slow_first_token:ms=100").unwrap();
        assert_eq!(spec.step(0).slow_first_token_ms, Some(100));
    }

    #[test]
    fn scripts_repeat_their_last_step() {
        let spec = FaultSpec::parse("529, 429 ,ok").unwrap();
        assert!(spec.is_script());
        assert_eq!(spec.step(0).as_str(), "529");
        assert_eq!(spec.step(1).as_str(), "429");
        assert_eq!(spec.step(2).as_str(), "ok");
        assert_eq!(spec.step(9).as_str(), "ok");
    }

    #[test]
    fn say_carries_exact_text_and_combines_with_shapes() {
        let text = "{\"reply\": \"Changes close 48 hours before delivery.\", \"ok\": true}\n\u{e9}";
        let spec = FaultSpec::parse(&say_spec(text)).unwrap();
        assert_eq!(
            spec.step(0).outcome,
            Outcome::Answer { shape: None, transport: None, say: Some(text.to_owned()) }
        );
        // Padding is optional, and a script of two answers walks like any other.
        let script = format!("{}+max_tokens,say:b64=aGk=", say_spec("cut me"));
        let spec = FaultSpec::parse(&script).unwrap();
        assert_eq!(
            spec.step(0).outcome,
            Outcome::Answer {
                shape: Some(Shape::MaxTokens),
                transport: None,
                say: Some("cut me".into())
            }
        );
        assert!(matches!(&spec.step(1).outcome, Outcome::Answer { say: Some(t), .. } if t == "hi"));
        assert_eq!(
            FaultSpec::parse("say:b64=").unwrap().step(0).outcome,
            Outcome::Answer { shape: None, transport: None, say: Some(String::new()) }
        );
    }

    #[test]
    fn bad_specs_name_the_problem() {
        let cases = [
            ("52", "unknown fault `52`"),
            ("cut", "`cut` needs `after=<n>`"),
            ("cut:after=x", "after must be a whole number"),
            ("429:retry=2", "`429` has no parameter `retry`"),
            ("429:retry_after=-1", "retry_after must be a non-negative"),
            ("529+ok", "combines an error"),
            ("cut:after=1+stall:after=2", "second stream fault"),
            ("ok,,529", "a script step is empty"),
            ("hang:ms=5", "`hang` takes no parameters"),
            ("", "the spec is empty"),
            ("say", "`say` needs `b64="),
            ("say:b64=aGk+b", "unknown fault `b`"),
            ("say:b64=%%", "b64 is not base64url"),
            ("say:b64=_w", "does not decode to UTF-8"),
            ("say:b64=aGk+say:b64=aGk", "second answer text"),
            ("529+say:b64=aGk", "combines an error"),
        ];
        for (spec, want) in cases {
            let err = FaultSpec::parse(spec).unwrap_err().to_string();
            assert!(err.contains(want), "{spec}: {err}");
            assert!(err.contains(&format!("`{}`", spec.trim())), "{spec}: {err}");
        }
    }
}
