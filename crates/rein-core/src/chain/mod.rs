//! The chain of tiers: the engine that runs one call from route to answer.
//!
//! This module holds the [`Engine`]: its builder, the state it shares between calls (routes,
//! retry budgets, breakers, the kill switch), its two ways in ([`Engine::complete`],
//! [`Engine::stream`]) and the tier loop. The loop: kill switch → for each tier in this call's
//! order (the failover share, or a failover drill's, may put one tier first; the route-to lever
//! drops the tiers before its own, see [`crate::lever`]): skipped when a prompt that was too long
//! for an earlier tier cannot fit its window either → admitted by its breaker, or skipped while
//! it cools down → its attempts (`tier`) → its breaker settled by what they did
//! ([`crate::breaker::Permit::settle`] when it gave up). When every tier is done: the provider's
//! context-length error while the prompt fit none of them, else the route's degraded reply.
//! Every step lands in the [`CallReport`](crate::report::CallReport).
//!
//! Beside it: `tier` runs one tier's attempts (each bounded by the clocks, cut to what the
//! deadline leaves; the call's first attempt always starts, a later one only when its share of
//! the deadline fits, see `call::attempt_floor`; retry waits from `retry::next` and the
//! provider's retry budget; every failure classified and its disposition followed), `check`
//! decides what the ladder's verdict on an answer means, `call` holds the call's types and the
//! state it accumulates, `judge` the judge rule.

mod call;
mod check;
mod judge;
mod tier;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use crate::attempt::Forwarder;
use crate::breaker::{Admission, BreakerState, KillSwitch};
use crate::budget::{RetryBudget, RetryBudgetPolicy};
use crate::classify::Classified;
use crate::classify::Disposition;
use crate::context::CallContext;
use crate::degraded::DegradedActs;
use crate::lever::TierLevers;
use crate::model::{ChatRequest, Message};
use crate::release::{self, ReleaseStream};
use crate::report::{Outcome, SkipReason, Step};
use crate::retry::{Jitter, SeededJitter};
use crate::route::Route;

pub use call::{CallError, Completion, Observer};
use call::{CallState, Ended};
pub use judge::{JUDGE_RULE, JudgeRule};
use tier::{TierEnd, TierRun};

#[derive(Debug)]
struct RouteState {
    route: Route,
    /// Accumulates the failover share; a call that tips it over 1.0 goes to the failover tier.
    failover_credit: Mutex<f64>,
}

#[derive(Debug)]
struct Inner {
    /// By name, with foldhash (configured names, looked up at every call: SipHash was ~160
    /// instructions a lookup).
    routes: RwLock<HashMap<String, Arc<RouteState>, foldhash::fast::RandomState>>,
    budgets: RwLock<HashMap<String, Arc<RetryBudget>, foldhash::fast::RandomState>>,
    budget_policy: RetryBudgetPolicy,
    jitter: Arc<dyn Jitter>,
    kill: KillSwitch,
    levers: TierLevers,
    observer: Option<Arc<dyn Observer>>,
    acts: Option<Arc<dyn DegradedActs>>,
}

/// The engine. Cheap to clone; clones share routes, budgets, breakers and the kill switch.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// Builds an [`Engine`].
#[derive(Debug)]
pub struct EngineBuilder {
    routes: Vec<Route>,
    budget_policy: RetryBudgetPolicy,
    jitter: Arc<dyn Jitter>,
    kill: KillSwitch,
    observer: Option<Arc<dyn Observer>>,
    acts: Option<Arc<dyn DegradedActs>>,
}

impl EngineBuilder {
    pub fn route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    pub fn retry_budget(mut self, policy: RetryBudgetPolicy) -> Self {
        self.budget_policy = policy;
        self
    }

    /// Inject the random source for backoff jitter (tests fix it).
    pub fn jitter(mut self, jitter: Arc<dyn Jitter>) -> Self {
        self.jitter = jitter;
        self
    }

    pub fn kill_switch(mut self, kill: KillSwitch) -> Self {
        self.kill = kill;
        self
    }

    pub fn observer(mut self, observer: Arc<dyn Observer>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// The degraded mode's rules that act without a model, asked before any degraded reply.
    pub fn degraded_acts(mut self, acts: Arc<dyn DegradedActs>) -> Self {
        self.acts = Some(acts);
        self
    }

    pub fn build(self) -> Engine {
        let engine = Engine {
            inner: Arc::new(Inner {
                routes: RwLock::new(HashMap::default()),
                budgets: RwLock::new(HashMap::default()),
                budget_policy: self.budget_policy,
                jitter: self.jitter,
                kill: self.kill,
                levers: TierLevers::default(),
                observer: self.observer,
                acts: self.acts,
            }),
        };
        engine.replace_routes(self.routes);
        engine
    }
}

/// A tier's breaker state, for operators.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TierState {
    pub route: String,
    pub tier: String,
    pub provider: String,
    pub model: String,
    pub state: BreakerState,
}

/// A tier's breaker and what the tier points at.
#[derive(Debug, Clone)]
pub struct TierCooldown {
    pub provider: String,
    pub model: String,
    pub cooldown: crate::breaker::Cooldown,
}

impl Engine {
    pub fn builder() -> EngineBuilder {
        EngineBuilder {
            routes: Vec::new(),
            budget_policy: RetryBudgetPolicy::default(),
            jitter: Arc::new(SeededJitter::new(0x5eed_2e1a)),
            kill: KillSwitch::default(),
            observer: None,
            acts: None,
        }
    }

    /// Swap the routes (config reload). Calls in flight finish on the routes they started with.
    pub fn replace_routes(&self, routes: Vec<Route>) {
        let map = routes
            .into_iter()
            .map(|route| {
                let state = RouteState { route, failover_credit: Mutex::new(0.0) };
                (state.route.name.clone(), Arc::new(state))
            })
            .collect();
        *write(&self.inner.routes) = map;
    }

    pub fn route_names(&self) -> Vec<String> {
        let mut names: Vec<String> = read(&self.inner.routes).keys().cloned().collect();
        names.sort();
        names
    }

    pub fn kill_switch(&self) -> &KillSwitch {
        &self.inner.kill
    }

    /// The operators' tier levers: route-to, and failover drills.
    pub fn levers(&self) -> &TierLevers {
        &self.inner.levers
    }

    /// The tier names of a route, in order, if it exists.
    pub fn tier_names(&self, route: &str) -> Option<Vec<String>> {
        read(&self.inner.routes)
            .get(route)
            .map(|state| state.route.tiers.iter().map(|tier| tier.name.clone()).collect())
    }

    /// The tier a route's failover share (and a failover drill) goes to: the configured one, or
    /// the second tier; `None` for a route with one tier.
    pub fn failover_tier(&self, route: &str) -> Option<String> {
        let routes = read(&self.inner.routes);
        let route = &routes.get(route)?.route;
        let index = failover_index(route)?;
        Some(route.tiers[index].name.clone())
    }

    /// Breaker states of every tier of every route.
    pub fn tier_states(&self) -> Vec<TierState> {
        let routes = read(&self.inner.routes);
        let mut out: Vec<TierState> = routes
            .values()
            .flat_map(|state| {
                state.route.tiers.iter().map(|tier| TierState {
                    route: state.route.name.clone(),
                    tier: tier.name.clone(),
                    provider: tier.provider.name().to_string(),
                    model: tier.model.clone(),
                    state: tier.cooldown.state(),
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.route, &a.tier).cmp(&(&b.route, &b.tier)));
        out
    }

    /// The breaker of one tier, with what it points at, so a config reload can keep the cooldown
    /// state of a tier that did not change.
    pub fn cooldown_of(&self, route: &str, tier: &str) -> Option<TierCooldown> {
        let routes = read(&self.inner.routes);
        let tier = routes.get(route)?.route.tiers.iter().find(|t| t.name == tier)?;
        Some(TierCooldown {
            provider: tier.provider.name().to_string(),
            model: tier.model.clone(),
            cooldown: tier.cooldown.clone(),
        })
    }

    /// The release mode of a route, if it exists.
    pub fn release_mode(&self, route: &str) -> Option<crate::route::ReleaseMode> {
        read(&self.inner.routes).get(route).map(|state| state.route.release)
    }

    /// The retry budget shared by every call to `provider`.
    pub fn retry_budget(&self, provider: &str) -> Arc<RetryBudget> {
        if let Some(budget) = read(&self.inner.budgets).get(provider) {
            return budget.clone();
        }
        write(&self.inner.budgets)
            .entry(provider.to_string())
            .or_insert_with(|| Arc::new(RetryBudget::new(self.inner.budget_policy)))
            .clone()
    }

    /// Run one call to completion, holding the answer until it is whole. The call ends by the
    /// context's deadline or the route's, whichever comes first. Not an `async fn`: that would
    /// hold the context and the request twice for the whole call, and borrow the engine and the
    /// route's name.
    pub fn complete(
        &self,
        mut ctx: CallContext,
        route: &str,
        request: ChatRequest,
    ) -> impl Future<Output = Result<Completion, CallError>> + Send + use<> {
        // The route is looked up now and the future owns what it needs (the engine is an
        // `Arc`): a caller can start the call and keep just the future, which holds the context
        // and the request once.
        let state = match self.route_state(route) {
            Ok(state) => state,
            Err(error) => {
                return futures_util::future::Either::Left(std::future::ready(Err(error)));
            }
        };
        let engine = self.clone();
        futures_util::future::Either::Right(async move {
            engine.run(&mut ctx, &state, &request, None).await
        })
    }

    /// Start a streamed call in the route's release mode. The call runs as the returned
    /// stream is polled, in the polling task, and stops when the stream is dropped.
    pub fn stream(
        &self,
        ctx: CallContext,
        route: &str,
        request: ChatRequest,
    ) -> Result<ReleaseStream, CallError> {
        let handle = self.route_state(route)?;
        Ok(release::start(self.clone(), handle, ctx, request))
    }

    fn route_state(&self, route: &str) -> Result<RouteHandle, CallError> {
        read(&self.inner.routes)
            .get(route)
            .cloned()
            .map(RouteHandle)
            .ok_or_else(|| CallError::UnknownRoute(route.to_string()))
    }

    /// The chain itself. With a forwarder (passthrough streams) events reach the caller as they
    /// arrive, and a failure after the first one ends the call as `Interrupted`.
    ///
    /// The caller's future owns the context and the request; the chain borrows them, so a call's
    /// state holds one copy of each however deep the chain's futures nest (an `async fn` keeps
    /// an argument it owns twice: once as it came and once as its local).
    pub(crate) async fn run(
        &self,
        ctx: &mut CallContext,
        state: &RouteHandle,
        request: &ChatRequest,
        forward: Option<&mut Forwarder>,
    ) -> Result<Completion, CallError> {
        let route = &state.0.route;
        ctx.narrow(route.clocks.deadline);
        let mut call = CallState::new(route, ctx);
        let structured = request
            .response_format
            .as_ref()
            .is_some_and(|format| !matches!(format, crate::model::ResponseFormat::Text));
        // The outcome is taken apart in the statement that awaits it and nothing is awaited
        // inside the match (its outcome would be kept beside the tiers' state while they run).
        // No tier answered: the route's reply, which may wait on its degraded acts, boxed as
        // rare (in line, its state would size every call's, a passthrough stream's for as long
        // as it is open).
        let settled = match self.run_tiers(ctx, state, &mut call, request, forward).await {
            Ok(done) => futures_util::future::Either::Left(std::future::ready(Ok(done))),
            Err(Ended::Error(error)) => {
                futures_util::future::Either::Left(std::future::ready(Err(error)))
            }
            Err(ended) => futures_util::future::Either::Right(Box::pin(
                self.settle(ctx, route, call, structured, request, ended),
            )),
        };
        let result = settled.await;
        let report = match &result {
            Ok(completion) => Some(&completion.report),
            Err(error) => error.report(),
        };
        if let (Some(observer), Some(report)) = (&self.inner.observer, report) {
            observer.on_call(report);
        }
        result
    }

    /// What the chain's end makes of a call no tier answered: the error, or the reply the route
    /// gives when it ended degraded (after its degraded acts, if any), was stopped, decided or
    /// declined.
    async fn settle(
        &self,
        ctx: &CallContext,
        route: &Route,
        mut call: CallState,
        structured: bool,
        request: &ChatRequest,
        ended: Ended,
    ) -> Result<Completion, CallError> {
        match ended {
            Ended::Error(error) => Err(error),
            Ended::Degraded => {
                if let (Some(acts), Some(message)) = (&self.inner.acts, request.last_user_text())
                    && let Some(acted) = acts.act(&route.name, ctx, message).await
                {
                    return call.acted(route, ctx, structured, acted);
                }
                call.degraded(route, ctx, structured)
            }
            Ended::Stopped => call.stopped(route, ctx, structured),
            Ended::Decided => call.decided(route, ctx, structured),
            Ended::Declined => call.declined(route, ctx, structured),
        }
    }

    /// The chain: the kill switch, then each tier in this call's order until one answers or the
    /// call ends on one; when none is left, the context-length error or the degraded reply.
    async fn run_tiers(
        &self,
        ctx: &CallContext,
        state: &RouteHandle,
        call: &mut CallState,
        request: &ChatRequest,
        mut forward: Option<&mut Forwarder>,
    ) -> Result<Completion, Ended> {
        let route = &state.0.route;
        if let Some(decided) = &ctx.decided {
            call.steps.push(Step::Decided { status: decided.status.clone() });
            return Err(Ended::Decided);
        }
        if let Some(status) = &ctx.run_stopped {
            call.steps.push(Step::RunStopped { status: status.clone() });
            return Err(Ended::Stopped);
        }
        if let Some(reason) = self.inner.kill.engaged_for(&route.name) {
            call.steps.push(Step::KillSwitch { reason });
            return Err(Ended::Degraded);
        }
        let mut order = self.tier_order(&state.0);
        if let Some(pin) = &ctx.pin_tier {
            order.retain(|&index| route.tiers[index].name == *pin);
        } else if let Some(flip) = self.inner.levers.route_to(&route.name)
            && let Some(start) =
                route.tiers.iter().position(|tier| flip.tier.as_deref() == Some(&tier.name))
        {
            // The route-to lever: calls start at its tier; the later ones stay behind it.
            order.retain(|&index| index >= start);
        }
        // Set by a context-length failure: only tiers with a larger window may follow, and
        // while none of them has been tried the provider's message is what the caller gets.
        let mut context_floor: Option<u32> = None;
        let mut context_unserved: Option<String> = None;
        // Set when a passthrough stream broke and the route continues it: the request later
        // tiers get (the text so far as an assistant prefill), and the failure that broke it.
        // Boxed: rare, and in line it would take ~300 bytes of every streamed call's state.
        let mut continued: Option<Box<(ChatRequest, Classified)>> = None;

        for (position, &index) in order.iter().enumerate() {
            let tier = &route.tiers[index];
            if continued.is_some() && !tier.prefill {
                call.skip(index, &tier.name, SkipReason::NoPrefill);
                continue;
            }
            if let Some(floor) = context_floor
                && tier.context_window.unwrap_or(0) <= floor
            {
                call.skip(index, &tier.name, SkipReason::ContextTooSmall);
                continue;
            }
            let Admission::Allowed(permit) = tier.cooldown.admit() else {
                call.skip(index, &tier.name, SkipReason::CoolingDown);
                continue;
            };
            let budget = self.retry_budget(tier.provider.name());
            let run = TierRun {
                ctx,
                route,
                index,
                tier,
                position,
                probe: permit.is_probe(),
                later: &order[position + 1..],
                context_floor,
                budget: &budget,
                jitter: self.inner.jitter.as_ref(),
                observer: self.inner.observer.as_deref(),
            };
            let asked = continued.as_ref().map_or(request, |continued| &continued.0);
            match run.attempts(call, asked, forward.as_deref_mut()).await {
                TierEnd::Answered(mut completion) => {
                    permit.succeeded();
                    if let Some(forward) = forward.as_deref().filter(|f| f.continuing()) {
                        // The caller has the whole text: what was sent before the break too.
                        completion.response.text = forward.sent_text().to_string();
                    }
                    return Ok(completion);
                }
                TierEnd::Broke { last } => {
                    permit.settle(true, Some(last.fault));
                    if let Some(forward) = forward.as_deref_mut() {
                        forward.continue_answer();
                        let sent = forward.continuable().unwrap_or_default().to_string();
                        let mut asked = request.clone();
                        asked.messages.push(Message::assistant(sent));
                        continued = Some(Box::new((asked, last)));
                    }
                }
                TierEnd::Ended { end, tier_failed } => {
                    if tier_failed {
                        permit.failed();
                    } else {
                        permit.succeeded();
                    }
                    return Err(end);
                }
                TierEnd::SteppedDown { last, tried, context_length } => {
                    permit.settle(tried, last.as_ref().map(|c| c.fault));
                    if let Some(reason) = context_length {
                        context_floor = Some(tier.context_window.unwrap_or(0));
                        context_unserved = Some(reason);
                    }
                    if tried
                        && last
                            .as_ref()
                            .is_some_and(|c| c.disposition != Disposition::NextLargerContextTier)
                    {
                        // A larger tier was tried and failed for another reason: the prompt
                        // did fit.
                        context_unserved = None;
                    }
                }
            }
        }

        if let Some(continued) = continued {
            let (_, last) = *continued;
            // No later tier carried the broken stream on: it ends in-band, as without
            // continuation.
            call.outcome = Outcome::Interrupted;
            let report = Box::new(call.report(route));
            let reason = format!("{} (no later tier could continue it)", last.reason);
            return Err(Ended::Error(CallError::Interrupted { reason, report }));
        }
        match context_unserved {
            Some(reason) => {
                call.outcome = Outcome::Stopped;
                let report = Box::new(call.report(route));
                Err(Ended::Error(CallError::ContextLength { reason, report }))
            }
            _ => Err(Ended::Degraded),
        }
    }

    /// The order tiers are tried in: as configured, except that the failover share's calls start
    /// on the failover tier (a failover drill in force sets the share).
    fn tier_order(&self, state: &RouteState) -> Vec<usize> {
        let count = state.route.tiers.len();
        let mut order: Vec<usize> = (0..count).collect();
        let failover = match self.inner.levers.drill(&state.route.name) {
            Some(drill) => failover_index(&state.route)
                .map(|tier| crate::route::FailoverShare { tier, share: drill.share }),
            None => state.route.failover,
        };
        if let Some(failover) = failover
            && failover.tier < count
            && failover.share > 0.0
        {
            {
                let mut credit = match state.failover_credit.lock() {
                    Ok(guard) => guard,
                    Err(poisoned) => poisoned.into_inner(),
                };
                *credit += failover.share.min(1.0);
                if *credit >= 1.0 {
                    *credit -= 1.0;
                    order.retain(|&i| i != failover.tier);
                    order.insert(0, failover.tier);
                }
            }
        }
        order
    }
}

/// The index of the tier a route's failover share goes to: the configured one, else the second.
fn failover_index(route: &Route) -> Option<usize> {
    match route.failover {
        Some(failover) if failover.tier < route.tiers.len() => Some(failover.tier),
        _ => (route.tiers.len() > 1).then_some(1),
    }
}

/// A handle on a route's state, kept for the whole call so a reload cannot change it mid-way.
#[derive(Debug, Clone)]
pub(crate) struct RouteHandle(Arc<RouteState>);

impl RouteHandle {
    pub(crate) fn release_mode(&self) -> crate::route::ReleaseMode {
        self.0.route.release
    }

    /// Whether a broken passthrough stream is continued on a later tier.
    pub(crate) fn continuation(&self) -> bool {
        self.0.route.continuation
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    match lock.read() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    match lock.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}
