//! Integration tests of the gateway crate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bedrock;
mod config;
mod continuation;
mod coverage;
mod dashboard;
mod gateway;
mod handoffs;
mod judge;
mod keepalive;
mod labels;
mod ladder;
mod levers;
mod mcp;
mod otlp;
mod phoenix;
mod probe;
mod prometheus;
mod responses;
mod responses_upstream;
mod runs;
mod tools;
mod traces;
mod vertex;
mod wire_edges;
