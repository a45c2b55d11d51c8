//! Integration tests of the engine on virtual time: the fault matrix, cooldowns, the retry
//! budget, release modes and a property test over random fault scripts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod chain;
mod deadline;
mod degraded;
mod ladder;
mod matrix;
mod planning;
mod props;
mod release;
mod rules_fp;
mod support;
mod tool_turns;
