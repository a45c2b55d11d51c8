//! rein's engine: everything that happens around one model call, with no HTTP server, no CLI
//! and no environment reads. A call goes route → kill switch → chain of tiers → attempts (clocks,
//! retry policy, retry budget) → provider adapter, and every step lands in the call's report.
//! See ARCHITECTURE.md for the map.

pub mod agreement;
mod attempt;
pub mod breaker;
pub mod budget;
pub mod chain;
pub mod classify;
pub mod clock;
pub mod context;
pub mod coverage;
pub mod degraded;
pub mod eval;
pub mod failure;
pub mod handoff;
pub mod json_write;
pub mod lever;
pub mod model;
pub mod problems;
pub mod provider;
pub mod quality;
pub mod release;
pub mod report;
pub mod retry;
pub mod route;
pub mod run;
pub mod secret;
pub mod sli;
pub mod sweep;
pub mod trace;
pub mod validate;

pub use breaker::{BreakerState, Cooldown, CooldownPolicy, KillFlip, KillScope, KillSwitch};
pub use budget::{RetryBudget, RetryBudgetPolicy};
pub use chain::{
    CallError, Completion, Engine, EngineBuilder, JUDGE_RULE, JudgeRule, Observer, TierCooldown,
    TierState,
};
pub use classify::{Classified, Disposition, FailureKind, Fault, classify};
pub use clock::{ClockPolicy, Deadline};
pub use context::{CallContext, Decided, TraceParent};
pub use degraded::{Acted, DegradedActs, DegradedReply, Delivery};
pub use failure::{Clock, Failure, HttpError, WireFormat};
pub use lever::{FailoverDrill, RouteToFlip, TierLevers};
pub use model::*;
pub use provider::{EventStream, Provider};
pub use release::{ReleaseStream, Released};
pub use report::{Alert, AttemptRecord, CallReport, Outcome, ServedBy, SkipReason, Step};
pub use retry::{FixedJitter, Jitter, RetryPolicy, SeededJitter, TimeoutMove, TimeoutMoves};
pub use route::{FailoverShare, ReleaseMode, Route, Tier, TierParams};
pub use secret::Secret;
