#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! rein-tools end to end: the dispatcher over the real SQLite tool store, calling fake backends
//! over real HTTP on 127.0.0.1 that the tests kill, hang and bring back.

mod backend;
mod bulkheads;
mod config;
mod gates;
mod mcp;
mod next_steps;
mod reads;
mod support;
mod writes;
