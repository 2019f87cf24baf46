//! Deciding a request's checks against a store, with shadow policies kept apart.

use std::sync::Arc;

use sluice_core::{Decision, Nanos, Policy};
use sluice_store::{Check, Degraded, Reported, Settle, Store, StoreError};

use crate::headers::LimitView;

/// A policy as the HTTP faces need to know it.
#[derive(Debug, Clone)]
pub struct PolicyInfo {
    /// The policy's name: in headers (`ietf`), metrics and logs.
    pub name: String,
    /// The validated policy (its limit and window go into the headers).
    pub policy: Policy,
    /// Decide and count, never deny, tell nobody.
    pub shadow: bool,
    /// Decide and count, never deny; when over, tell what the request is passed on to.
    pub soft: bool,
    /// What it counts, when not requests: the `qu` of its `RateLimit-Policy` item.
    pub unit: Option<String>,
    /// Counts requests in flight: a request's charge is given back when its response ends.
    pub concurrency: bool,
}

impl PolicyInfo {
    /// An enforced policy counting requests: `name`, `policy`.
    pub fn enforced(name: &str, policy: Policy) -> Self {
        Self { name: name.to_owned(), policy, shadow: false, soft: false, unit: None, concurrency: false }
    }

    /// A configured policy as the faces describe it.
    pub fn of_config(p: &sluice_config::PolicyConfig) -> Self {
        Self {
            name: p.name.clone(),
            policy: p.policy,
            shadow: p.shadow,
            soft: p.soft,
            unit: p.unit.clone(),
            concurrency: p.concurrency,
        }
    }

    /// Decided apart from the enforced limits, never denying: shadow or soft.
    pub fn apart(&self) -> bool {
        self.shadow || self.soft
    }
}

/// The outcome of one request's checks.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// True when every enforced check admitted (shadow checks never deny).
    pub allowed: bool,
    /// One decision per check, in the order given.
    pub decisions: Vec<Decision>,
    /// Index (into the checks) of the limit to describe in headers: the one that denied, or the
    /// one closest to denying.
    pub describe: Option<usize>,
    /// Indices of shadow checks that would have denied.
    pub shadow_denied: Vec<usize>,
    /// Indices of soft checks over their limit: the request passes, and what it is passed on to
    /// is told (`sluice-soft-limited`).
    pub soft_over: Vec<usize>,
    /// Indices of shadow checks not decided: the enforced limits denied the request, so, as if
    /// enforced, the shadow policy would have been charged nothing (or its store failed).
    pub not_evaluated: Vec<usize>,
    /// When the store could not decide the enforced limits and its failure mode answered
    /// (`fail-open`, `local`): which mode, and the error. `None` for the store's own decision.
    pub degraded: Option<Degraded>,
    /// True when the store itself decided (some of) the request just now
    /// ([`sluice_store::Reported::answered`]): the only outcome that shows a failing store
    /// decides again. False when nothing was asked, a failure mode answered or a deny cache
    /// repeated an earlier denial.
    pub store_answered: bool,
    /// When the store decided, on its clock: what giving a charge back names
    /// ([`Outcome::charged_at`]).
    pub at: Nanos,
    /// Per check, when its checks were decided at different times (several store calls, a
    /// Redis Cluster's nodes); empty when all were decided at `at`.
    pub at_each: Vec<Nanos>,
}

impl Outcome {
    /// When check `index` was decided (and, if admitted, charged).
    pub fn charged_at(&self, index: usize) -> Nanos {
        self.at_each.get(index).copied().unwrap_or(self.at)
    }

    /// The delay to hold the request for (shaping): the longest of its limits' delays.
    pub fn delay(&self) -> Nanos {
        self.decisions.iter().map(|d| d.delay).max().unwrap_or(0)
    }

    /// This outcome followed by `later`'s (decided after this one admitted: the limits that
    /// needed the body): admitted only if both admitted; the limit described is the one that
    /// denied, else the tighter of the two described.
    pub fn then(mut self, later: Outcome) -> Outcome {
        let offset = self.decisions.len();
        let later_describe = later.describe.map(|i| i + offset);
        self.describe = match (self.describe, later_describe) {
            (_, Some(b)) if !later.allowed => Some(b),
            (Some(a), Some(b)) if self.allowed => {
                let (da, db) = (self.decisions[a], later.decisions[b - offset]);
                Some(if da.tighter(db) == da { a } else { b })
            }
            (a, b) => a.or(b),
        };
        if self.at != later.at || !self.at_each.is_empty() || !later.at_each.is_empty() {
            let times = |o: &Outcome| (0..o.decisions.len()).map(|i| o.charged_at(i)).collect::<Vec<_>>();
            self.at_each = [times(&self), times(&later)].concat();
        }
        self.allowed &= later.allowed;
        self.degraded = self.degraded.or(later.degraded);
        self.store_answered |= later.store_answered;
        self.decisions.extend(later.decisions);
        self.shadow_denied.extend(later.shadow_denied.into_iter().map(|i| i + offset));
        self.soft_over.extend(later.soft_over.into_iter().map(|i| i + offset));
        self.not_evaluated.extend(later.not_evaluated.into_iter().map(|i| i + offset));
        self
    }

    /// Takes the checks in `order` (`order[new] = old`, a permutation of the checks): the
    /// decisions move with them, and the indices kept of them follow. False, and nothing
    /// changed, when `order` does not fit the decisions.
    pub(crate) fn reorder(&mut self, order: &[usize]) -> bool {
        let mut new_of = vec![usize::MAX; self.decisions.len()];
        for (new, &old) in order.iter().enumerate() {
            match new_of.get_mut(old) {
                Some(slot) if *slot == usize::MAX => *slot = new,
                _ => return false,
            }
        }
        if order.len() != self.decisions.len() {
            return false;
        }
        self.decisions = order.iter().map(|&old| self.decisions[old]).collect();
        if !self.at_each.is_empty() {
            self.at_each = order.iter().map(|&old| self.at_each[old]).collect();
        }
        self.describe = self.describe.map(|i| new_of[i]);
        for i in self.shadow_denied.iter_mut().chain(self.soft_over.iter_mut()).chain(self.not_evaluated.iter_mut()) {
            *i = new_of[*i];
        }
        true
    }
}

/// Decides checks for the HTTP faces: enforced checks together (all-or-nothing) and, apart
/// from them, shadow checks, which are decided and charged as if enforced but never deny.
#[derive(Clone)]
pub struct Enforcer {
    /// Where the state lives; asked once per request for all its enforced limits.
    store: Arc<dyn Store>,
    /// The store's policies (same order), with what the HTTP faces need: names, shadow flags.
    policies: Arc<[PolicyInfo]>,
}

impl std::fmt::Debug for Enforcer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enforcer").field("store", &self.store.kind()).field("policies", &self.policies).finish()
    }
}

impl Enforcer {
    /// An enforcer over `store`, whose policies (same order) are described by `policies`.
    pub fn new(store: Arc<dyn Store>, policies: Vec<PolicyInfo>) -> Self {
        Self { store, policies: policies.into() }
    }

    /// An enforcer of every policy of `store`, none of them shadow.
    pub fn of_store(store: Arc<dyn Store>) -> Self {
        let policies = store.policies().iter().map(|p| PolicyInfo::enforced(&p.name, p.policy)).collect();
        Self::new(store, policies)
    }

    /// An enforcer of the policies of `config` (in config order, as routes index them) on `store`.
    pub fn of_config(store: Arc<dyn Store>, config: &sluice_config::Config) -> Self {
        let policies = config.policies.iter().map(PolicyInfo::of_config).collect();
        Self::new(store, policies)
    }

    /// The policies, indexed as checks refer to them.
    pub fn policies(&self) -> &[PolicyInfo] {
        &self.policies
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Index of the policy called `name`.
    pub fn policy_index(&self, name: &str) -> Option<usize> {
        self.policies.iter().position(|p| p.name == name)
    }

    /// The description of policy `i` (as checks index it).
    pub fn policy(&self, i: usize) -> Option<&PolicyInfo> {
        self.policies.get(i)
    }

    /// The limit a response to `checks` describes: the one that denied, or the one closest to
    /// denying.
    pub fn view<'a>(&'a self, checks: &[Check], outcome: &Outcome) -> Option<LimitView<'a>> {
        let i = outcome.describe?;
        let info = &self.policies[checks[i].policy];
        Some(LimitView::of(info, outcome.decisions[i]))
    }

    /// Every limit a response to `checks` describes, in the checks' order: the enforced ones
    /// (a shadow policy never limits the request, so it is not listed), with their keys as
    /// partition keys when `partition_keys`. Walked lazily: no list is built.
    pub fn views<'a>(
        &'a self,
        checks: &'a [Check],
        outcome: &'a Outcome,
        partition_keys: bool,
    ) -> impl Iterator<Item = LimitView<'a>> + Clone + 'a {
        checks.iter().zip(&outcome.decisions).filter_map(move |(c, d)| {
            let info = self.enforced(c)?;
            let view = LimitView::of(info, *d);
            Some(if partition_keys { view.with_partition_key(&c.key.0) } else { view })
        })
    }

    /// The position in [`Enforcer::views`] of the limit [`Enforcer::view`] describes.
    pub fn described(&self, checks: &[Check], outcome: &Outcome) -> Option<usize> {
        let i = outcome.describe?;
        Some(checks[..i].iter().filter(|c| self.enforced(c).is_some()).count())
    }

    /// The policy of `check` when it is enforced (neither shadow nor soft: the limits a
    /// client's response describes are those that can deny it).
    fn enforced(&self, check: &Check) -> Option<&PolicyInfo> {
        self.policies.get(check.policy).filter(|p| !p.apart())
    }

    /// Decides `checks` for one request at once, when nothing needs awaiting: no checks, or
    /// no shadow check and a store that decides at once ([`Store::decide_at_once`]). `None`:
    /// ask [`Enforcer::decide`].
    pub fn decide_at_once(&self, checks: &[Check]) -> Option<Result<Outcome, StoreError>> {
        if checks.is_empty() {
            // Nothing to ask (a route whose every limit waits for the body): no round trip.
            let none = Outcome {
                allowed: true,
                decisions: Vec::new(),
                describe: None,
                shadow_denied: Vec::new(),
                soft_over: Vec::new(),
                not_evaluated: Vec::new(),
                degraded: None,
                store_answered: false,
                at: 0,
                at_each: Vec::new(),
            };
            return Some(Ok(none));
        }
        if self.any_apart(checks) {
            return None;
        }
        Some(self.store.decide_at_once(checks)?.map(enforced))
    }

    /// Decides `checks` as [`Enforcer::decide`] would, charging nothing ([`Store::peek`]):
    /// shadow and soft policies are reported, never deny. A store failure is an error: no
    /// failure mode answers a question.
    pub async fn peek(&self, checks: &[Check]) -> Result<Outcome, StoreError> {
        let verdict = self.store.peek(checks, None).await?;
        let mut o = enforced(Reported { verdict, degraded: None, answered: true });
        if self.any_apart(checks) {
            let mut allowed = true;
            for (i, (c, d)) in checks.iter().zip(&o.decisions).enumerate() {
                match self.policies.get(c.policy) {
                    Some(p) if p.soft && !d.allowed => o.soft_over.push(i),
                    Some(p) if p.shadow && !d.allowed => o.shadow_denied.push(i),
                    _ => allowed &= d.allowed,
                }
            }
            o.allowed = allowed;
            let enforced_denied = (0..checks.len()).find(|&i| !self.is_apart(&checks[i]) && !o.decisions[i].allowed);
            o.describe = enforced_denied.or(o.describe.filter(|&i| !self.is_apart(&checks[i])));
        }
        Ok(o)
    }

    /// True when one of `checks` is of a shadow policy.
    fn any_apart(&self, checks: &[Check]) -> bool {
        checks.iter().any(|c| self.is_apart(c))
    }

    /// True when `check` is of a shadow or soft policy.
    fn is_apart(&self, check: &Check) -> bool {
        self.policies.get(check.policy).is_some_and(PolicyInfo::apart)
    }

    /// Decides `checks` for one request.
    pub async fn decide(&self, checks: &[Check]) -> Result<Outcome, StoreError> {
        if let Some(decided) = self.decide_at_once(checks) {
            return decided;
        }
        if !self.any_apart(checks) {
            return self.store.decide_reported(checks, None).await.map(enforced);
        }
        let (shadow, enforced): (Vec<usize>, Vec<usize>) = (0..checks.len()).partition(|&i| self.is_apart(&checks[i]));
        let pick = |idx: &[usize]| idx.iter().map(|&i| checks[i]).collect::<Vec<_>>();
        let reported = self.store.decide_reported(&pick(&enforced), None).await?;
        let (enforced_v, degraded, store_answered) = (reported.verdict, reported.degraded, reported.answered);
        let mut decisions = vec![enforced_v.decisions.first().copied().unwrap_or(NO_DECISION); checks.len()];
        let mut at_each = vec![enforced_v.at; checks.len()];
        for (j, &i) in enforced.iter().enumerate() {
            decisions[i] = enforced_v.decisions[j];
            at_each[i] = enforced_v.charged_at(j);
        }
        let describe = enforced_v.tightest().map(|j| enforced[j]);
        let (mut shadow_denied, mut soft_over, mut not_evaluated) = (Vec::new(), Vec::new(), Vec::new());
        // Shadow and soft policies are charged only when the request is admitted, as they would
        // be if enforced (all or nothing); their store's failure never fails the request.
        let shadow_v = match enforced_v.allowed {
            true => self.store.decide(&pick(&shadow), None).await.ok(),
            false => None,
        };
        for (j, &i) in shadow.iter().enumerate() {
            match &shadow_v {
                Some(v) => {
                    decisions[i] = v.decisions[j];
                    at_each[i] = v.charged_at(j);
                    if !v.decisions[j].allowed {
                        let soft = self.policies.get(checks[i].policy).is_some_and(|p| p.soft);
                        if soft { soft_over.push(i) } else { shadow_denied.push(i) }
                    }
                }
                None => {
                    decisions[i] = NO_DECISION;
                    not_evaluated.push(i);
                }
            }
        }
        Ok(Outcome {
            allowed: enforced_v.allowed,
            decisions,
            describe,
            shadow_denied,
            soft_over,
            not_evaluated,
            degraded,
            store_answered,
            at: enforced_v.at,
            at_each,
        })
    }

    /// What `outcome` charged for `checks`, each as a settlement that gives it back whole: every
    /// check of an admitted request the store itself decided, and its shadow checks when they
    /// were charged (decided together, they are charged only if all admit). Nothing for a denied
    /// request (nothing was charged) or a verdict a failure mode gave (`fail-open` charged
    /// nothing; `local` charged its fallback, not this store).
    pub fn charges(&self, checks: &[Check], outcome: &Outcome) -> Vec<Settle> {
        self.charged(checks, outcome).map(|(_, s)| s).collect()
    }

    /// [`Enforcer::charges`], each with the index of its check.
    pub fn charged<'c>(
        &'c self,
        checks: &'c [Check],
        outcome: &'c Outcome,
    ) -> impl Iterator<Item = (usize, Settle)> + 'c {
        let charged_any = outcome.allowed && outcome.degraded.is_none();
        let apart_charged =
            outcome.shadow_denied.is_empty() && outcome.soft_over.is_empty() && outcome.not_evaluated.is_empty();
        checks
            .iter()
            .enumerate()
            .filter(move |(_, c)| charged_any && c.cost > 0 && (apart_charged || !self.is_apart(c)))
            .map(|(i, c)| (i, Settle { check: *c, charged_at: outcome.charged_at(i), actual: 0 }))
    }

    /// Gives back everything `outcome` charged for `checks` ([`Enforcer::charges`]), in one
    /// store call: the request it decided went no further.
    pub async fn refund(&self, checks: &[Check], outcome: &Outcome) -> Result<(), StoreError> {
        let charges = self.charges(checks, outcome);
        if charges.is_empty() {
            return Ok(());
        }
        match self.store.settle_at_once(&charges) {
            Some(done) => done,
            None => self.store.settle(&charges, None).await,
        }
    }
}

/// The outcome of checks none of which is shadow: the store's verdict, as reported.
fn enforced(reported: Reported) -> Outcome {
    let v = reported.verdict;
    Outcome {
        describe: v.tightest(),
        allowed: v.allowed,
        decisions: v.decisions,
        shadow_denied: Vec::new(),
        soft_over: Vec::new(),
        not_evaluated: Vec::new(),
        degraded: reported.degraded,
        store_answered: reported.answered,
        at: v.at,
        at_each: v.at_each,
    }
}

const NO_DECISION: Decision =
    Decision { allowed: true, limit: 0, remaining: 0, reset_after: 0, retry_after: 0, delay: 0 };

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(limit: u64) -> Decision {
        Decision { allowed: true, limit, remaining: limit, reset_after: 0, retry_after: 0, delay: 0 }
    }

    /// An enforcer over a memory store at a manual clock: "limit" (2 per minute) and
    /// "watched" (1 per minute, shadow).
    fn enforcer(clock: Arc<sluice_core::ManualClock>) -> Enforcer {
        use sluice_store::{MemoryOptions, MemoryStore, NamedPolicy};
        let window =
            |limit| Policy::from(sluice_core::FixedWindow::new(limit, 60 * sluice_core::NANOS_PER_SEC).unwrap());
        let named = |name: &str, limit| NamedPolicy { name: name.into(), policy: window(limit) };
        let store = MemoryStore::new(vec![named("limit", 2), named("watched", 1)], MemoryOptions::default(), clock);
        let info = |name: &str, limit, shadow| PolicyInfo { shadow, ..PolicyInfo::enforced(name, window(limit)) };
        Enforcer::new(Arc::new(store), vec![info("limit", 2, false), info("watched", 1, true)])
    }

    #[tokio::test]
    async fn a_refund_gives_back_what_was_charged_and_nothing_else() {
        let clock = Arc::new(sluice_core::ManualClock::new(1_000 * sluice_core::NANOS_PER_SEC));
        let e = enforcer(Arc::clone(&clock));
        let key = sluice_store::KeyHash([7; 16]);
        let both = [Check { policy: 0, key, cost: 1 }, Check { policy: 1, key, cost: 1 }];
        let first = e.decide(&both).await.unwrap();
        assert!(first.allowed && first.shadow_denied.is_empty());
        assert_eq!(e.charges(&both, &first).len(), 2, "the enforced and the shadow charge");
        clock.advance(5);
        // The shadow limit would deny now: it is charged nothing, so only the enforced check is.
        let second = e.decide(&both).await.unwrap();
        assert_eq!((second.allowed, &second.shadow_denied[..]), (true, &[1][..]));
        let charges = e.charges(&both, &second);
        assert_eq!(
            charges.iter().map(|c| (c.check.policy, c.charged_at)).collect::<Vec<_>>(),
            [(0, sluice_core::Clock::now(&*clock))]
        );
        e.refund(&both, &second).await.unwrap();
        let third = e.decide(&both[..1]).await.unwrap();
        assert_eq!((third.allowed, third.decisions[0].remaining), (true, 0), "the refund made room for this one");
        // A denial charged nothing, and a verdict a failure mode gave is not this store's.
        assert!(e.charges(&both[..1], &e.decide(&both[..1]).await.unwrap()).is_empty());
        let degraded = Outcome {
            degraded: Some(Degraded { mode: "fail-open", error: StoreError::Timeout(5) }),
            ..e.decide(&[Check { policy: 0, key: sluice_store::KeyHash([8; 16]), cost: 1 }]).await.unwrap()
        };
        assert!(e.charges(&both[..1], &degraded).is_empty());
    }

    #[test]
    fn reordered_checks_keep_what_is_said_of_each() {
        // Checks 0 and 1 were decided first; check 2 (a body limit) belongs first.
        let mut o = Outcome {
            allowed: true,
            decisions: vec![decision(10), decision(20), decision(30)],
            describe: Some(2),
            shadow_denied: vec![1],
            soft_over: Vec::new(),
            not_evaluated: vec![0],
            degraded: None,
            store_answered: true,
            at: 5,
            at_each: vec![5, 5, 7],
        };
        assert!(o.reorder(&[2, 0, 1]));
        assert_eq!((o.charged_at(0), o.charged_at(1)), (7, 5), "the times move with their checks");
        assert_eq!(o.decisions.iter().map(|d| d.limit).collect::<Vec<_>>(), [30, 10, 20]);
        assert_eq!((o.describe, &o.shadow_denied[..], &o.not_evaluated[..]), (Some(0), &[2][..], &[1][..]));
        // An order that is not a permutation of the checks changes nothing.
        for wrong in [&[0, 1][..], &[0, 0, 1], &[0, 1, 3]] {
            let before = o.decisions.clone();
            assert!(!o.reorder(wrong));
            assert_eq!(o.decisions, before);
        }
    }
}
