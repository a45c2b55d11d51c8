//! rein's gateway: the engine behind the OpenAI and Anthropic HTTP APIs, so an app in any
//! language moves to rein by changing its SDK's base URL. Config, wire formats, the HTTP server,
//! the admin API and metrics live here; the engine itself is `rein-core`.

pub mod config;
pub mod metrics;
pub mod runs;
pub mod runtime;
pub mod server;
pub mod webhook;
pub mod wire;
