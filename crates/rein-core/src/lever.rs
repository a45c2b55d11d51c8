//! The operators' tier levers on a route, beside the kill switch: **route-to** (a route's calls
//! start at a named tier, the earlier ones skipped and the later ones still behind it, flipped at
//! runtime without a deploy; each flip numbered and recorded in the store by the caller before it
//! applies, like the kill switch's) and the **failover drill** (a temporary failover share that
//! ends by itself at its expiry, so a drill whose operator went away never stays on).
//!
//! Route-to calls are ordinary traffic: unlike an eval's tier pin they are counted in the SLIs,
//! and the tier that answered is reported as usual. A call the lever's tier answers is answered
//! by plan, as the failover share's are (no tier failed, so it is not "fallback beyond plan");
//! one that tier fails goes on to the later tiers as a fallback.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::clock::unix_ms;

/// One recorded flip of a route's route-to lever: `tier` engaged, or `None` released.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteToFlip {
    pub route: String,
    /// The tier the route's calls start at; `None` releases the lever.
    pub tier: Option<String>,
    /// Who flipped it.
    pub author: String,
    /// Why.
    pub reason: String,
    /// Wall-clock time of the flip, as milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
}

impl RouteToFlip {
    /// A flip made now.
    pub fn now(
        route: impl Into<String>,
        tier: Option<String>,
        author: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            route: route.into(),
            tier,
            author: author.into(),
            reason: reason.into(),
            at_unix_ms: unix_ms(),
        }
    }
}

/// A failover drill in force on a route: `share` of its calls start at the failover tier until
/// `until`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailoverDrill {
    pub share: f64,
    /// Who started it.
    pub author: String,
    pub started_unix_ms: u64,
    pub ends_unix_ms: u64,
    #[serde(skip)]
    until: Instant,
}

#[derive(Debug, Default)]
struct LeverState {
    /// The last flip of each route whose lever is engaged.
    route_to: HashMap<String, RouteToFlip>,
    audit: Vec<RouteToFlip>,
    drills: HashMap<String, FailoverDrill>,
}

/// The tier levers of every route. Cheap to clone; clones share state.
#[derive(Debug, Clone, Default)]
pub struct TierLevers {
    state: Arc<RwLock<LeverState>>,
}

impl TierLevers {
    /// Apply a route-to flip recorded by the caller; takes effect on the next call.
    pub fn apply(&self, flip: RouteToFlip) {
        tracing::warn!(route = %flip.route, tier = ?flip.tier, author = %flip.author, reason = %flip.reason, "route-to lever flipped");
        self.replay(flip);
    }

    /// Bring back recorded flips, oldest first: each route ends as its last flip left it.
    pub fn restore(&self, flips: impl IntoIterator<Item = RouteToFlip>) {
        for flip in flips {
            self.replay(flip);
        }
    }

    fn replay(&self, flip: RouteToFlip) {
        let mut state = self.write();
        if flip.tier.is_some() {
            state.route_to.insert(flip.route.clone(), flip.clone());
        } else {
            state.route_to.remove(&flip.route);
        }
        state.audit.push(flip);
    }

    /// The flip that engaged `route`'s lever, while it is engaged.
    pub fn route_to(&self, route: &str) -> Option<RouteToFlip> {
        self.read().route_to.get(route).cloned()
    }

    /// Every route-to flip so far, oldest first.
    pub fn audit(&self) -> Vec<RouteToFlip> {
        self.read().audit.clone()
    }

    /// Start (or replace) a failover drill on `route`: `share` of its calls go to the failover
    /// tier for `length`, then the configured share is back, whatever happens to the caller.
    pub fn start_drill(
        &self,
        route: &str,
        share: f64,
        length: Duration,
        author: &str,
    ) -> FailoverDrill {
        let started = unix_ms();
        let drill = FailoverDrill {
            share: share.clamp(0.0, 1.0),
            author: author.to_string(),
            started_unix_ms: started,
            ends_unix_ms: started.saturating_add(length.as_millis() as u64),
            until: Instant::now() + length,
        };
        tracing::warn!(
            route,
            share,
            length_ms = length.as_millis() as u64,
            author,
            "failover drill started"
        );
        self.write().drills.insert(route.to_string(), drill.clone());
        drill
    }

    /// End `route`'s drill now; the drill that was in force, if any.
    pub fn stop_drill(&self, route: &str) -> Option<FailoverDrill> {
        let stopped = self.write().drills.remove(route);
        stopped.filter(|drill| Instant::now() < drill.until)
    }

    /// The drill in force on `route`, if one is and it has not expired.
    pub fn drill(&self, route: &str) -> Option<FailoverDrill> {
        let found = self.read().drills.get(route).cloned()?;
        if Instant::now() < found.until {
            return Some(found);
        }
        self.write().drills.remove(route);
        None
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, LeverState> {
        match self.state.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, LeverState> {
        match self.state.write() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_to_flips_replay_to_the_last_per_route() {
        let levers = TierLevers::default();
        levers.apply(RouteToFlip::now("support", Some("fallback".into()), "ana", "bad edit"));
        levers.apply(RouteToFlip::now("billing", Some("backup".into()), "ana", "incident"));
        levers.apply(RouteToFlip::now("billing", None, "bo", "resolved"));
        assert_eq!(levers.route_to("support").map(|f| f.tier), Some(Some("fallback".into())));
        assert_eq!(levers.route_to("billing"), None);
        let restored = TierLevers::default();
        restored.restore(levers.audit());
        assert_eq!(restored.route_to("support"), levers.route_to("support"));
        assert_eq!(restored.audit().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_drill_ends_by_itself_at_its_expiry() {
        let levers = TierLevers::default();
        let drill = levers.start_drill("support", 0.5, Duration::from_secs(120), "ana");
        assert_eq!(drill.share, 0.5);
        tokio::time::sleep(Duration::from_secs(119)).await;
        assert!(levers.drill("support").is_some());
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(levers.drill("support"), None, "expired at its end, nobody had to stop it");
        levers.start_drill("support", 2.0, Duration::from_secs(60), "ana");
        assert_eq!(levers.drill("support").map(|d| d.share), Some(1.0), "a share is at most 1");
        assert!(levers.stop_drill("support").is_some());
        assert_eq!(levers.drill("support"), None);
    }
}
