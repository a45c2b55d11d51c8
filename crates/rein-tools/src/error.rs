//! Why a tool call could not even be dispatched. Every outcome of a dispatched call (a degraded
//! answer, a queue, a refusal, `busy`, a hold) is an envelope, not an error; these are the
//! caller's mistakes and the store's failures, which the gateway maps to HTTP statuses in one
//! place.

use rein_store::StoreError;

/// A tool call that was not dispatched.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    /// No tool of that name in the config (404).
    #[error("no tool named `{0}`")]
    UnknownTool(String),
    /// The arguments are not a JSON object (400).
    #[error("bad arguments: {0}")]
    BadArgs(String),
    /// One argument cannot be used as it is (400): the URL needs it and it is missing, not a
    /// scalar, or would make a `.`/`..` path segment. Nothing was sent or stored.
    #[error("{message}")]
    BadArgument { argument: String, message: String },
    /// The key was used before with another tool or other arguments (422, as Stripe).
    #[error("idempotency key `{key}` was already used for `{tool}` with different arguments")]
    KeyMismatch { key: String, tool: String },
    /// Another request holds the key right now (409, as Stripe): retry later with the same key.
    /// Within `retry_after_ms` that request has finished or its lease can be taken over.
    #[error(
        "a request with idempotency key `{key}` is in flight; retry with the same key (it is settled within {retry_after_ms} ms)"
    )]
    KeyInFlight { key: String, retry_after_ms: u64 },
    /// A `key_from = "conversation"` tool called without a conversation id (400).
    #[error(
        "tool `{tool}` derives its idempotency key from the conversation: send a conversation id"
    )]
    MissingConversation { tool: String },
    /// The durable store failed before anything was sent (503).
    #[error("tool store: {0}")]
    Store(#[from] StoreError),
}
