//! The validation ladder and repair: everything rein checks about an answer before it is used,
//! cheapest first, as pure code (no I/O, no clocks; the only future is the [`Rule`] trait's, so a
//! gateway rule can call a webhook). The engine runs [`check_answer`] on a tier's response and
//! acts on the [`Verdict`]: ask again with a higher ceiling once when cut off, the safe reply on
//! a refusal, one re-ask naming the exact problems ([`reask_message`]) on a failure, then fail
//! closed.
//!
//! - `evidence`: what rein saw in this run (tool results, evidence the caller passed).
//! - `parse`: find the answer's JSON and tell apart the shapes a code fix can mend.
//! - `repair`: the certain fixes in code, each recorded as a [`CodeRepair`].
//! - `schema`: the route's JSON Schema, compiled once, checked by rein itself.
//! - `rules` and `builtin`: problems, the [`Rule`] trait and the built-in business rules.
//! - `ladder`: the rungs in order, the route's [`OutputContract`] and the [`Verdict`].
//! - `tool_call`: the rung for a turn that stops to call tools instead of answering: declared
//!   tools, arguments that parse and match the tool's parameters schema. The output contract
//!   applies only to a turn that answers.

mod builtin;
mod evidence;
mod ladder;
mod parse;
mod repair;
mod rules;
mod schema;
mod tool_call;

pub use builtin::{
    BuiltinRule, CitedIdsReturned, Condition, FlagRequiredWhen, IdMatchesTool, NumbersInCitedText,
    numbers_in,
};
pub use evidence::{CALLER_SOURCE, Evidence, EvidenceItem};
pub use ladder::{
    OutputContract, ProblemKindSelector, Verdict, check_answer, check_output, check_stop,
    raised_ceiling, reask_message,
};
pub use parse::{AnswerShape, parse_answer};
pub use repair::{CodeRepair, RepairedText, fix_enum_case, parse_with_repairs};
pub use rules::{Answer, Problem, ProblemKind, Rule, RuleSet};
pub use schema::{CompiledSchema, EnumMismatch, SchemaError};
pub use tool_call::{
    ToolCallCheck, check_tool_calls, is_tool_call_turn, tool_calls_as_text, tool_reask_message,
};
