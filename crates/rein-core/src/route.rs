//! Routes and tiers: what the engine is configured with.
//!
//! A [`Route`] is what a caller names in `model`; it owns an ordered chain of [`Tier`]s (a model
//! on a provider, with its own prompt and parameters), the clocks, the retry policy, the release
//! mode for streams, an optional failover share and the degraded reply.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::breaker::{Cooldown, CooldownPolicy};
use crate::clock::ClockPolicy;
use crate::degraded::DegradedReply;
use crate::model::ChatRequest;
use crate::provider::Provider;
use crate::retry::{RetryPolicy, TimeoutMoves};
use crate::validate::OutputContract;

/// Parameters a tier sets on every request it sends, replacing the caller's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TierParams {
    /// Replaces the request's system prompt, so a fallback model runs the prompt it was
    /// evaluated with.
    pub system_prompt: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
}

/// One step of a route's chain: a model on a provider.
#[derive(Debug, Clone)]
pub struct Tier {
    /// Name within the route (`primary`, `fallback`, ...), used in reports and metrics.
    pub name: String,
    pub provider: Arc<dyn Provider>,
    /// The provider's model id (may be a pinned snapshot).
    pub model: String,
    /// Context window in tokens, when known; a context-length failure moves to a tier with a
    /// larger one.
    pub context_window: Option<u32>,
    pub params: TierParams,
    /// Attempts on this tier; `None` takes the route's retry policy.
    pub attempts: Option<u32>,
    pub cooldown: Cooldown,
    /// The tier continues an answer from an assistant prefill (the text so far as the last,
    /// assistant, message): what a passthrough continuation asks of it.
    pub prefill: bool,
}

impl Tier {
    pub fn new(
        name: impl Into<String>,
        provider: Arc<dyn Provider>,
        model: impl Into<String>,
    ) -> Self {
        Self {
            name: name.into(),
            provider,
            model: model.into(),
            context_window: None,
            params: TierParams::default(),
            attempts: None,
            cooldown: Cooldown::new(CooldownPolicy::default()),
            prefill: false,
        }
    }

    pub fn with_cooldown(mut self, policy: CooldownPolicy) -> Self {
        self.cooldown = Cooldown::new(policy);
        self
    }

    pub fn with_context_window(mut self, tokens: u32) -> Self {
        self.context_window = Some(tokens);
        self
    }

    pub fn with_params(mut self, params: TierParams) -> Self {
        self.params = params;
        self
    }

    pub fn with_attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts);
        self
    }

    /// Whether the tier continues an answer from an assistant prefill.
    pub fn with_prefill(mut self, prefill: bool) -> Self {
        self.prefill = prefill;
        self
    }

    /// The output ceiling this tier sends `request` with: its own, else the request's.
    pub fn max_tokens(&self, request: &ChatRequest) -> Option<u32> {
        self.params.max_tokens.or(request.max_tokens)
    }

    /// The request as this tier sends it.
    pub fn prepare(&self, request: &ChatRequest) -> ChatRequest {
        let mut out = request.clone();
        out.model = self.model.clone();
        if let Some(system) = &self.params.system_prompt {
            out.system = Some(system.clone());
        }
        out.max_tokens = self.max_tokens(request);
        if let Some(temperature) = self.params.temperature {
            out.temperature = Some(temperature);
        }
        if let Some(top_p) = self.params.top_p {
            out.top_p = Some(top_p);
        }
        out
    }
}

/// How a streamed answer is released to the caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReleaseMode {
    /// Hold the answer until it is complete (and checked), so a stream that dies mid-way is
    /// retried or fallen back invisibly.
    #[default]
    Checked,
    /// Forward tokens as they arrive. Retry and fallback stay possible until the first token is
    /// forwarded; after that a failure ends the stream with an in-band error.
    Passthrough,
}

/// A steady share of traffic sent to a fallback tier first, so that path is always exercised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FailoverShare {
    /// Index of the tier in the chain.
    pub tier: usize,
    /// Fraction of calls, 0.0–1.0.
    pub share: f64,
}

/// A named route.
#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub tiers: Vec<Tier>,
    pub clocks: ClockPolicy,
    pub retry: RetryPolicy,
    /// Which timeouts are retried on the same tier and which go to the next one.
    pub on_timeout: TimeoutMoves,
    pub release: ReleaseMode,
    pub failover: Option<FailoverShare>,
    /// The reply when no model can; `None`: the call fails with [`crate::CallError::Unserved`],
    /// saying why, rather than promise anything.
    pub degraded: Option<DegradedReply>,
    /// The decided reply of a stopped run (a template over the call's variables); `None` takes
    /// the degraded reply.
    pub stopped_reply: Option<DegradedReply>,
    /// The version of the route's prompts and model settings this route runs (from the store),
    /// named in every report so an answer can be traced to the settings that produced it.
    pub settings_version: Option<i64>,
    /// What an answer must satisfy before it is used (the validation ladder); `None` accepts
    /// any whole answer.
    pub contract: Option<OutputContract>,
    /// The highest token ceiling a cut-off answer may be asked again with.
    pub max_tokens_cap: u32,
    /// Passthrough only: when the stream breaks after text reached the caller, a later tier that
    /// takes a prefill continues from that text, and the caller sees one stream.
    pub continuation: bool,
    /// The label keys of the caller's tags the call's report keeps (the slices metrics are
    /// broken down by; a bounded set, so series cannot explode).
    pub labels: Vec<String>,
}

impl Route {
    pub fn new(name: impl Into<String>, tiers: Vec<Tier>) -> Self {
        Self {
            name: name.into(),
            tiers,
            clocks: ClockPolicy::default(),
            retry: RetryPolicy::default(),
            on_timeout: TimeoutMoves::default(),
            release: ReleaseMode::default(),
            failover: None,
            degraded: None,
            stopped_reply: None,
            settings_version: None,
            contract: None,
            max_tokens_cap: 8192,
            continuation: false,
            labels: Vec::new(),
        }
    }
}
