//! End-to-end tests of rein: real HTTP on 127.0.0.1:0 against an in-process `rein sim`, with
//! real clocks and short budgets. They prove the wiring that the virtual-time tests of each
//! crate cannot: the real adapters, the real simulator and the engine between them.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod architecture;
mod cli;
mod crash;
mod drill;
mod edge;
mod engine_e2e;
mod eval;
mod judge;
mod record;
mod upstream_caps;
mod upstream_http2;
mod upstream_wire;
