//! The Chat Completions shapes rein reads, shared by the streaming and non-streaming paths:
//! every field optional and `null`-tolerant, unknown fields ignored, because OpenAI-compatible
//! servers differ in what they omit. Also the `finish_reason` → [`StopReason`] mapping.

use std::ops::Range;

use serde::Deserialize;

use rein_core::{StopReason, TokenLogprob, Usage};

use crate::json_scan::{Scan, first};

#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    #[serde(default)]
    pub completion_tokens: Option<u32>,
}

impl WireUsage {
    /// `null` or the usage object, read directly (for the readers of a chunk and of an
    /// answer); `None` when serde must read it.
    pub(super) fn read(scan: &mut Scan<'_>) -> Option<Option<Self>> {
        if scan.peek()? == b'n' {
            return scan.null().map(|()| None);
        }
        let mut usage = Self::default();
        let mut seen = 0;
        scan.object(|scan, key| {
            let (bit, field) = match key {
                "prompt_tokens" => (1, &mut usage.prompt_tokens),
                "completion_tokens" => (2, &mut usage.completion_tokens),
                _ => return scan.skip(2),
            };
            first(&mut seen, bit)?;
            *field = scan.optional_u32()?;
            Some(())
        })?;
        Some(Some(usage))
    }

    pub(super) fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
        }
    }
}

#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct WireLogprobs {
    /// Log probabilities of the content tokens. (`refusal` token logprobs are not carried:
    /// rein scores answers, not refusals.)
    #[serde(default)]
    pub content: Option<Vec<WireTokenLogprob>>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(crate) struct WireTokenLogprob {
    pub token: String,
    pub logprob: f64,
    #[serde(default)]
    pub top_logprobs: Option<Vec<WireTopLogprob>>,
}

#[derive(Debug, PartialEq, Deserialize)]
pub(crate) struct WireTopLogprob {
    pub token: String,
    pub logprob: f64,
}

impl WireLogprobs {
    pub(super) fn to_tokens(&self) -> Vec<TokenLogprob> {
        self.content
            .iter()
            .flatten()
            .map(|item| TokenLogprob {
                token: item.token.clone(),
                logprob: item.logprob,
                top: item
                    .top_logprobs
                    .iter()
                    .flatten()
                    .map(|top| (top.token.clone(), top.logprob))
                    .collect(),
            })
            .collect()
    }
}

/// A function call as both shapes spell it (`tool_calls[].function`, legacy `function_call`).
#[derive(Debug, Default, PartialEq, Deserialize)]
pub(crate) struct WireFunction {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub arguments: Option<String>,
}

/// A choice's texts as the direct readers take them from a chunk's `delta` or an answer's
/// `message` (the two shapes hold the same four).
#[derive(Debug, Default)]
pub(super) struct ScannedTexts {
    pub content: Option<String>,
    pub refusal: Option<String>,
    pub reasoning_content: Option<String>,
    pub reasoning: Option<String>,
    /// Where `content`'s string lies in the text, its quotes included (none for `null`).
    pub content_at: Option<Range<usize>>,
}

/// A `delta` or `message` object read directly: its four texts; `None` when serde must read it
/// (tool calls in either shape are read by serde).
pub(super) fn scan_texts(scan: &mut Scan<'_>) -> Option<ScannedTexts> {
    let mut texts = ScannedTexts::default();
    let mut seen = 0;
    scan.object(|scan, key| {
        let (bit, field) = match key {
            "content" => (1, &mut texts.content),
            "refusal" => (2, &mut texts.refusal),
            "reasoning_content" => (4, &mut texts.reasoning_content),
            "reasoning" => (8, &mut texts.reasoning),
            "tool_calls" | "function_call" => {
                first(&mut seen, if key == "tool_calls" { 16 } else { 32 })?;
                return scan.null();
            }
            _ => return scan.skip(3),
        };
        first(&mut seen, bit)?;
        scan.whitespace();
        let start = scan.at;
        *field = scan.optional_owned()?;
        if bit == 1 && texts.content.is_some() {
            texts.content_at = Some(start..scan.at);
        }
        Some(())
    })?;
    Some(texts)
}

/// `choices` read directly: `null`, or each choice's index, its `inner` object (`delta` or
/// `message`, read by `texts`, or `null`) and finish reason, made into a choice by `make`;
/// `None` when serde must read it (logprobs are read by serde).
pub(super) fn scan_choices<C>(
    scan: &mut Scan<'_>,
    inner: &str,
    make: impl Fn(Option<u32>, Option<ScannedTexts>, Option<String>) -> C,
) -> Option<Option<Vec<C>>> {
    if scan.peek()? == b'n' {
        return scan.null().map(|()| None);
    }
    let mut choices = Vec::with_capacity(1);
    scan.array(|scan| {
        let (mut index, mut texts, mut finish_reason) = (None, None, None);
        let mut seen = 0;
        scan.object(|scan, key| {
            match key {
                "index" => {
                    first(&mut seen, 1)?;
                    index = scan.optional_u32()?;
                }
                "finish_reason" => {
                    first(&mut seen, 4)?;
                    finish_reason = scan.optional_owned()?;
                }
                "logprobs" => {
                    first(&mut seen, 8)?;
                    scan.null()?;
                }
                _ if key == inner => {
                    first(&mut seen, 2)?;
                    texts = match scan.peek()? {
                        b'n' => scan.null().map(|()| None)?,
                        _ => Some(scan_texts(scan)?),
                    };
                }
                _ => scan.skip(2)?,
            }
            Some(())
        })?;
        choices.push(make(index, texts, finish_reason));
        Some(())
    })?;
    Some(Some(choices))
}

pub(crate) fn stop_reason(finish_reason: &str) -> StopReason {
    match finish_reason {
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_owned()),
    }
}
