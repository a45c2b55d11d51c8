//! rein's runtime: the one crate that reads `rein.toml`. It turns the file into validated,
//! typed config (providers, routes, output contracts, tools, stores, the server's settings, with
//! every problem named by its key), assembles the parts (the engine with its routes, provider
//! adapters, the tool dispatcher, the stores), reloads them, and runs the background workers
//! (the outbox replay, the kill-switch sync). The gateway serves a [`Runtime`] over HTTP; a Rust
//! agent uses one directly:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rein_core::{CallContext, ChatRequest, Message};
//! use rein_runtime::Runtime;
//!
//! // A simulated provider stands in for OpenAI here; a real config names `kind = "openai"` and
//! // `api_key_env = "OPENAI_API_KEY"`.
//! let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
//! let sim = rein_sim::bind(loopback, rein_sim::SimConfig::default()).await?;
//! let dir = tempfile::tempdir()?;
//! let text = format!(
//!     r#"
//!     [store]
//!     sqlite_path = "{db}"
//!
//!     [providers.main]
//!     kind = "openai_compatible"
//!     base_url = "{url}/v1"
//!
//!     [routes.support]
//!     tiers = [{{ name = "primary", provider = "main", model = "gpt-4o-mini" }}]
//!     "#,
//!     db = dir.path().join("rein.sqlite").display(),
//!     url = sim.base_url(),
//! );
//! let runtime = Runtime::from_toml(&text, |_| None).await?;
//! let request = ChatRequest { messages: vec![Message::user("hi")], ..ChatRequest::default() };
//! let done = runtime.engine.complete(CallContext::new(), "support", request).await?;
//! assert!(done.report.served_by.is_some());
//! # Ok(())
//! # }
//! ```

pub mod config;
mod degraded;
pub mod escalation;
pub mod online_judge;
pub mod otlp;
pub mod recorder;
pub mod runs;
mod runtime;
pub mod upstreams;
pub mod webhook;
mod workers;

pub use runtime::{
    CONFIG_AUTHOR, EnvSource, Overrides, Runtime, RuntimeBuilder, Snapshot, StartError,
};
pub use upstreams::BuildError;
