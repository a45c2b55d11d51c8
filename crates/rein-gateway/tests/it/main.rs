//! Integration tests of the gateway crate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod config;
mod continuation;
mod coverage;
mod gateway;
mod handoffs;
mod keepalive;
mod labels;
mod ladder;
mod otlp;
mod phoenix;
mod runs;
mod tools;
mod wire_edges;
