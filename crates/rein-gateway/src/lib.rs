//! rein's gateway: the engine behind the OpenAI and Anthropic HTTP APIs, so an app in any
//! language moves to rein by changing its SDK's base URL. Only HTTP lives here: the server and
//! its edge, the handlers, the one mapping of errors to status codes and bodies, the wire
//! formats and the Prometheus metrics. The config, its reload and the assembled parts are
//! `rein-runtime`'s; the engine is `rein-core`'s.

pub mod metrics;
pub mod server;
pub mod wire;
