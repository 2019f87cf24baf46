//! Deciding one request: its checks, together, under the locks of every shard they touch.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use sluice_core::{Decision, Nanos, Policy, State};

use super::holds;
use super::shard::{ShardError, ShardOps};
use super::table::Table;
use crate::key::KeyHash;
use crate::store::{Check, NamedPolicy, Settle, StoreError, Verdict, validate_checks, validate_settles};

/// Decides `checks` at the time `now` gives, read once every shard involved is locked: all
/// admitted and charged, or none charged.
///
/// Why under the locks: a time read before them can be older than the time a request that got
/// the lock first was charged at; decided at it, a full bucket looks a few nanoseconds short
/// of a token and the request is refused, told to come back in a second. Read under the locks,
/// the times a shard sees never go backwards (the clock is monotonic across threads).
pub(crate) fn decide(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    checks: &[Check],
    now: impl FnOnce() -> Nanos,
) -> Result<Verdict, StoreError> {
    match checks {
        [one] => {
            validate_checks(policies, checks)?;
            decide_one(policies, tables, one, now)
        }
        _ => decide_many(policies, tables, checks, now, Charge::IfAllAdmit, Holds::Mind),
    }
}

/// Decides `checks` as [`decide`] would, at the time `now` gives, charging nothing: whether
/// the request would be admitted now, and each check's decision at its cost.
pub(crate) fn peek(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    checks: &[Check],
    now: impl FnOnce() -> Nanos,
) -> Result<Verdict, StoreError> {
    decide_many(policies, tables, checks, now, Charge::Never, Holds::Mind)
}

/// Whether [`decide_many`] looks for units held for leases ([`holds`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holds {
    /// Yes: a request with a check on a table with holds is decided by [`decide_holding`].
    Mind,
    /// No: [`decide_holding`] has them in hand.
    Minded,
}

/// Whether [`decide_many`] charges the checks it decides.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Charge {
    /// All of them when all admit (a decision).
    IfAllAdmit,
    /// None (a peek).
    Never,
}

fn full(table: &Table) -> StoreError {
    table.counters.refused.fetch_add(1, Ordering::Relaxed);
    StoreError::Full { max_keys: table.max_keys }
}

/// The common case: one check, one shard, decided in place.
fn decide_one(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    check: &Check,
    now: impl FnOnce() -> Nanos,
) -> Result<Verdict, StoreError> {
    decide_single(policies, tables, check, now).map(|(d, at)| Verdict::at(d.allowed, vec![d], at))
}

/// One check, with no `Verdict` to allocate: its decision, and the time it was decided at.
/// Its cost is checked by the algorithm itself, under the lock, with the same error
/// [`validate_checks`] gives.
pub(crate) fn decide_single(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    check: &Check,
    now: impl FnOnce() -> Nanos,
) -> Result<(Decision, Nanos), StoreError> {
    let table = tables.get(check.policy).ok_or(StoreError::UnknownPolicy { index: 0, policy: check.policy })?;
    let mut shard = table.lock(table.shard_of(&check.key));
    // Read under the shard's lock: a first hold waits for this decision to end.
    if table.holds.active() {
        drop(shard);
        let v = decide_holding(policies, tables, std::slice::from_ref(check), Box::new(now), Charge::IfAllAdmit)?;
        return Ok((v.decisions[0], v.at));
    }
    let now = now();
    match shard.decide_one(&check.key, now, check.cost) {
        Ok(d) => Ok((d, now)),
        Err(ShardError::Cost(source)) => Err(StoreError::Cost { index: 0, source }),
        Err(ShardError::Full) => Err(full(table)),
    }
}

/// A distinct (policy, key) of a request.
struct Target {
    policy: usize,
    key: KeyHash,
    /// Index into the request's lock groups.
    group: usize,
    /// Whether the key was stored when the request began.
    exists: bool,
    /// A working copy, for a key checked more than once or not yet stored; `None` means the key is
    /// peeked now and charged in place at commit.
    work: Option<State>,
}

/// Several checks (or any number, for a peek): checked, then every shard involved locked in
/// (table id, shard) order, all decided, then charged all or none (or never). An empty request
/// is admitted, with nothing to do.
fn decide_many(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    checks: &[Check],
    now: impl FnOnce() -> Nanos,
    charge: Charge,
    holds: Holds,
) -> Result<Verdict, StoreError> {
    validate_checks(policies, checks)?;
    if checks.is_empty() {
        return Ok(Verdict::at(true, Vec::new(), 0));
    }
    // Distinct targets, and for each check the target it names.
    let mut targets: Vec<Target> = Vec::with_capacity(checks.len());
    let mut uses: Vec<u32> = Vec::with_capacity(checks.len());
    let mut target_of = Vec::with_capacity(checks.len());
    for c in checks {
        let found = targets.iter().position(|t| t.policy == c.policy && t.key == c.key);
        let t = found.unwrap_or_else(|| {
            targets.push(Target { policy: c.policy, key: c.key, group: 0, exists: false, work: None });
            uses.push(0);
            targets.len() - 1
        });
        uses[t] += 1;
        target_of.push(t);
    }

    // Lock groups in the global order; a shard shared by several targets is locked once.
    let mut groups: Vec<(u64, usize, usize)> = targets
        .iter()
        .map(|t| {
            let table = &tables[t.policy];
            (table.id, table.shard_of(&t.key), t.policy)
        })
        .collect();
    groups.sort_unstable();
    groups.dedup_by_key(|g| (g.0, g.1));
    let mut guards: Vec<MutexGuard<'_, dyn ShardOps + 'static>> =
        groups.iter().map(|&(_, shard, policy)| tables[policy].lock(shard)).collect();
    // Read under the shards' locks: a first hold waits for this decision to end.
    if holds == Holds::Mind && groups.iter().any(|&(_, _, policy)| tables[policy].holds.active()) {
        drop(guards);
        return decide_holding(policies, tables, checks, Box::new(now), charge);
    }
    let now = now();
    for (t, n) in targets.iter_mut().zip(&uses) {
        let table = &tables[t.policy];
        let at = (table.id, table.shard_of(&t.key));
        t.group = groups.partition_point(|g| (g.0, g.1) < at);
        let shard = &mut guards[t.group];
        t.exists = shard.contains(&t.key);
        if *n > 1 || !t.exists {
            t.work = Some(shard.working(&t.key, now));
        }
    }

    // Decide every check, in order; working copies carry earlier checks' charges.
    let mut decisions = Vec::with_capacity(checks.len());
    let mut allowed = true;
    for (index, (c, &ti)) in checks.iter().zip(&target_of).enumerate() {
        let policy: &Policy = &policies[c.policy].policy;
        let t = &mut targets[ti];
        let d = match &mut t.work {
            Some(state) => policy.check(state, now, c.cost),
            None => guards[t.group].peek(&t.key, now, c.cost),
        }
        .map_err(|source| StoreError::Cost { index, source })?;
        allowed &= d.allowed;
        decisions.push(d);
    }
    if !allowed || charge == Charge::Never {
        return Ok(Verdict::at(allowed, decisions, now));
    }

    // Room for the new keys, shard by shard, before anything is written.
    for (g, guard) in guards.iter_mut().enumerate() {
        let in_group = || targets.iter().filter(move |t| t.group == g);
        let needed = in_group()
            .filter(|t| !t.exists)
            .filter(|t| t.work.as_ref().is_some_and(|s| !policies[t.policy].policy.is_fresh(s, now)))
            .count();
        if needed > 0 {
            let keep: Vec<KeyHash> = in_group().filter(|t| t.exists).map(|t| t.key).collect();
            if !guard.make_room(needed, &keep, now) {
                return Err(full(&tables[groups[g].2]));
            }
        }
    }

    // Commit: charge in place what was peeked, store the working copies.
    for (index, (c, &ti)) in checks.iter().zip(&target_of).enumerate() {
        let t = &targets[ti];
        if t.work.is_none() {
            guards[t.group].charge(&t.key, now, c.cost).map_err(|source| StoreError::Cost { index, source })?;
        }
    }
    for t in targets {
        if let Some(state) = t.work {
            guards[t.group].store(&t.key, state, now);
        }
    }
    Ok(Verdict::at(allowed, decisions, now))
}

/// [`decide_many`] for a request with a check on a table with holds: under the holds locks of
/// those tables (taken in table id order, before any shard's), each such check's key has its
/// ended holds reaped, and is decided at its cost plus the units it holds (what it leaves to
/// others beside them); then, when all admit and `charge` says so, charged its cost alone.
fn decide_holding(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    checks: &[Check],
    // Boxed: the function and decide_many call each other, and a closure type per call would
    // have no end.
    now: Box<dyn FnOnce() -> Nanos + '_>,
    charge: Charge,
) -> Result<Verdict, StoreError> {
    validate_checks(policies, checks)?;
    // The holds locks of every table of the request that could hold units, not only of those
    // that hold some now: a first hold on another table waits for this decision to end (it
    // reads no shard's lock-protected flag here, as decide_many does).
    let mut held_tables: Vec<(u64, usize)> = checks
        .iter()
        .filter(|c| holds::interval(&policies[c.policy].policy).is_some())
        .map(|c| (tables[c.policy].id, c.policy))
        .collect();
    held_tables.sort_unstable();
    held_tables.dedup_by_key(|t| t.0);
    let mut locks: Vec<_> = held_tables.iter().map(|&(_, p)| (p, tables[p].holds.lock())).collect();
    let now = now();
    // Per check with holds: the units its key holds, when the first hold ends, its bucket's
    // interval, and whether it is peeked at its cost plus them (within the capacity) or alone.
    let mut beside = Vec::with_capacity(checks.len());
    let mut peeked_at = checks.to_vec();
    for (c, peeked) in checks.iter().zip(peeked_at.iter_mut()) {
        let policy = &policies[c.policy].policy;
        let (Some((_, keys)), Some(t)) = (locks.iter_mut().find(|(p, _)| *p == c.policy), holds::interval(policy))
        else {
            beside.push(None);
            continue;
        };
        holds::reap(&tables[c.policy], keys, &c.key, now);
        let (held, first_end) = holds::held(keys, &c.key);
        let within = c.cost + held <= policy.limit();
        if within {
            peeked.cost = c.cost + held;
        }
        beside.push(Some((held, first_end, t, within)));
    }
    // Each check in turn, after the checks before it that were admitted (at their own cost: a
    // check decided beside its key's holds charges its cost, not them; one denied charges
    // nothing the checks after it see), as the Redis script decides them.
    let mut admitted: Vec<Check> = Vec::with_capacity(checks.len());
    let mut decisions = Vec::with_capacity(checks.len());
    for ((c, at_held), b) in checks.iter().zip(&peeked_at).zip(&beside) {
        admitted.push(*at_held);
        let peek = decide_many(policies, tables, &admitted, || now, Charge::Never, Holds::Minded)?;
        admitted.pop();
        let d = *peek.decisions.last().expect("one decision a check");
        let d = match *b {
            None => d,
            Some((held, first_end, t, within)) => holds::beside(d, within, c.cost, held, t, first_end, now),
        };
        if d.allowed {
            admitted.push(*c);
        }
        decisions.push(d);
    }
    let allowed = decisions.iter().all(|d| d.allowed);
    if !allowed || charge == Charge::Never {
        return Ok(Verdict::at(allowed, decisions, now));
    }
    let charged = decide_many(policies, tables, checks, || now, Charge::IfAllAdmit, Holds::Minded)?;
    drop(locks);
    // Admitted beside the holds, so admitted alone (the check at `cost` is the weaker one),
    // unless a check of a table without holds was charged by another request meanwhile (those
    // tables' shards are not held between the look and the charge): then its own denial.
    if !charged.allowed {
        return Ok(charged);
    }
    // What is left is told beside the holds.
    Ok(Verdict::at(true, decisions, now))
}

/// Settles `settles` at the time `now` gives, read under each key's shard lock. Each charge is
/// settled on its own: a settlement decides nothing, so there is nothing to hold together.
pub(crate) fn settle(
    policies: &[NamedPolicy],
    tables: &[Arc<Table>],
    settles: &[Settle],
    now: impl Fn() -> Nanos,
) -> Result<(), StoreError> {
    validate_settles(policies, settles)?;
    for s in settles.iter().filter(|s| s.actual != s.check.cost) {
        let table = &tables[s.check.policy];
        // A table with holds: no decision beside them between its look and its charge, and
        // the key's holds that ended counted first, at their ends, as any other call does.
        let mut holds = table.holds.active().then(|| table.holds.lock());
        let reap_at = holds.as_ref().map(|_| now());
        if let (Some(keys), Some(at)) = (holds.as_mut(), reap_at) {
            holds::reap(table, keys, &s.check.key, at);
        }
        let mut shard = table.lock(table.shard_of(&s.check.key));
        // A refund that reads no clock (every algorithm but the sliding log) is given the
        // charge's own time: no clock read for it.
        let reads_now = s.actual > s.check.cost || policies[s.check.policy].policy.refund_reads_now();
        let now = if reads_now { now() } else { s.charged_at };
        if !shard.settle(&s.check.key, s.charged_at, s.check.cost, s.actual, now) {
            return Err(full(table));
        }
    }
    Ok(())
}
