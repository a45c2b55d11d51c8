//! Scripts walking across retries, and scenario timelines on paused time.

use std::time::Duration;

use rein_sim::{FaultSource, Scenario, SimConfig};
use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn scripts_walk_by_sequence_key() {
    let sim = sim().await;
    let body = openai_body("retry me");
    let statuses = [
        sim.openai(&body, Some("529,429,ok")).await.status(),
        sim.openai(&body, Some("529,429,ok")).await.status(),
        sim.openai(&body, Some("529,429,ok")).await.status(),
        sim.openai(&body, Some("529,429,ok")).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [529, 429, 200, 200]);
    // Another conversation starts its own sequence, and so does another path.
    assert_eq!(sim.openai(&openai_body("other"), Some("529,ok")).await.status(), 529);
    assert_eq!(sim.anthropic(&anthropic_body("retry me"), Some("529,ok")).await.status(), 529);
    let log = sim.handle.log();
    let steps: Vec<Option<u32>> = log.iter().take(4).map(|e| e.script_step).collect();
    assert_eq!(steps, [Some(1), Some(2), Some(3), Some(3)]);
    assert_eq!(log[0].script.as_deref(), Some("529,429,ok"));
    assert_eq!(log[1].fault, "429");
    assert_eq!(log[0].sequence_key, log[3].sequence_key);
    assert_ne!(log[0].sequence_key, log[4].sequence_key);
    assert_ne!(log[0].sequence_key, log[5].sequence_key);
}

#[tokio::test]
async fn scripts_in_the_model_field() {
    let sim = sim().await;
    let mut body = openai_body("model script");
    body["model"] = json!("sim:cut:after=2,ok");
    body["stream"] = json!(true);
    let (_, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(!clean);
    let (text, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(clean);
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert_eq!(sim.handle.log()[1].fault_source, FaultSource::Model);
    // A reset starts scripts over.
    sim.handle.reset();
    let (_, clean) = read_all(sim.openai(&body, None).await).await;
    assert!(!clean);
}

const OUTAGE: &str = include_str!("../../scenarios/outage.toml");
const BROWNOUT: &str = include_str!("../../scenarios/brownout.toml");

#[tokio::test(start_paused = true)]
async fn outage_then_recovery_on_paused_time() {
    let scenario = Scenario::from_toml_str(OUTAGE).unwrap();
    let sim = sim_with(SimConfig { scenario: Some(scenario), ..SimConfig::default() }).await;
    let body = openai_body("is it up?");
    assert_eq!(sim.openai(&body, None).await.status(), 503);
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(sim.openai(&body, None).await.status(), 503);
    // The header beats the scenario.
    assert_eq!(sim.openai(&body, Some("ok")).await.status(), 200);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(sim.openai(&body, None).await.status(), 200);
    let log = sim.handle.log();
    assert_eq!(log[0].phase.as_deref(), Some("down"));
    assert_eq!(log[0].fault_source, FaultSource::Scenario);
    assert_eq!(log[0].fault, "503");
    assert_eq!(log[2].fault_source, FaultSource::Header);
    assert_eq!(log[3].phase.as_deref(), Some("recovered"));
    assert!(log[3].elapsed_ms >= 61_000);
    assert_eq!(log[3].unix_ms - log[0].unix_ms, log[3].elapsed_ms - log[0].elapsed_ms);

    // POST /_sim/reset restarts the timeline and clears the log.
    let reset = sim.client.post(sim.url("/_sim/reset")).send().await.unwrap();
    assert_eq!(reset.status(), 200);
    assert!(sim.handle.log().is_empty());
    assert_eq!(sim.openai(&body, None).await.status(), 503);
}

#[tokio::test(start_paused = true)]
async fn brownout_mix_is_reproducible() {
    /// The faults the scenario drew, optionally with header-overridden requests in between.
    async fn run(with_overrides: bool) -> Vec<String> {
        let scenario = Scenario::from_toml_str(BROWNOUT).unwrap();
        let sim = sim_with(SimConfig { scenario: Some(scenario), ..SimConfig::default() }).await;
        tokio::time::advance(Duration::from_secs(10)).await;
        for i in 0..12 {
            let response = sim.anthropic(&anthropic_body(&format!("req {i}")), None).await;
            let _ = response.bytes().await;
            if with_overrides {
                let _ = sim.anthropic(&anthropic_body("override"), Some("ok")).await;
            }
        }
        let log = sim.handle.log();
        assert!(log.iter().all(|e| e.phase.as_deref() == Some("brownout")));
        log.into_iter()
            .filter(|e| e.fault_source == FaultSource::Scenario)
            .map(|e| e.fault)
            .collect()
    }
    let first = run(false).await;
    assert_eq!(first.len(), 12);
    assert_eq!(first, run(false).await);
    assert_eq!(first, run(true).await, "overrides do not shift the draws");
    assert!(first.iter().any(|f| f == "529:retry_after=1"), "{first:?}");
    assert!(first.iter().any(|f| f == "slow_first_token:ms=3000"), "{first:?}");
}

#[tokio::test(start_paused = true)]
async fn phase_filters_spare_other_requests() {
    let scenario = Scenario::from_toml_str(
        "[[phase]]\nfault = \"529\"\nformat = \"anthropic\"\nmodels = [\"claude-*\"]\n",
    )
    .unwrap();
    let sim = sim_with(SimConfig { scenario: Some(scenario), ..SimConfig::default() }).await;
    assert_eq!(sim.anthropic(&anthropic_body("x"), None).await.status(), 529);
    assert_eq!(sim.openai(&openai_body("x"), None).await.status(), 200);
    let mut other = anthropic_body("x");
    other["model"] = json!("other-model");
    assert_eq!(sim.anthropic(&other, None).await.status(), 200);
}
