//! rein-sim's integration tests: a simulator on 127.0.0.1:0, spoken to over raw HTTP, and
//! exchanges with it recorded to a cassette and replayed.

mod anthropic;
mod bedrock;
mod cassette;
mod gemini;
mod log;
mod openai;
mod reply;
mod responses;
mod say;
mod scenario;
mod support;
mod tool_choice;
mod transport;
mod vertex;
