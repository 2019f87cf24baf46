//! The store's part of a request: its descriptors' checks decided together (all-or-nothing)
//! or each on its own (`charge = "independent"`), and what the checks that charged nothing hold.

use sluice_config::RlsCharge;
use sluice_core::Decision;
use sluice_http::pipeline::{Checks, Ruling};
use sluice_store::{Check, StoreError};
use tonic::Status;

use crate::snapshot::Snapshot;

/// Decides `checks` (those in `live`) as `charge` says; returns the ruling that is the
/// request's decision (to be counted and logged: the store's decisions at the descriptors'
/// costs, none when the store was only asked what is left) and one decision per check.
pub(crate) async fn decide_checks<'s>(
    snap: &'s Snapshot,
    charge: RlsCharge,
    checks: &[Check],
    live: &[usize],
    denied_already: bool,
) -> (Option<Ruling<'s>>, Result<Vec<Option<Decision>>, Status>) {
    let mut out = vec![None; checks.len()];
    if live.is_empty() {
        return (None, Ok(out));
    }
    let pick = |idx: &[usize], cost: Option<u64>| -> Vec<Check> {
        idx.iter().map(|&i| Check { cost: cost.unwrap_or(checks[i].cost), ..checks[i] }).collect()
    };
    let independent = charge == RlsCharge::Independent;
    if independent && !denied_already {
        let mut decided: Option<Ruling<'s>> = None;
        for &i in live {
            let ruling = rule(snap, vec![checks[i]]).await;
            let d = ruling.outcome.as_ref().map(|o| o.decisions[0]).map_err(store_status);
            decided = Some(match decided {
                None => ruling,
                Some(r) => r.then(ruling),
            });
            match d {
                Ok(d) => out[i] = Some(d),
                Err(s) => return (decided, Err(s)),
            }
        }
        return (decided, Ok(out));
    }
    if denied_already {
        // Another descriptor is over the limit whatever the store says: charge nothing
        // (all-or-nothing: the store is only asked what is left, which decides nothing, but
        // its failure, or a failure mode's answer, is counted), or, as envoyproxy/ratelimit
        // does, each descriptor on its own.
        let ruling = rule(snap, pick(live, if independent { None } else { Some(0) })).await;
        let decided = ruling.outcome.as_ref().map(|o| o.decisions.clone()).map_err(store_status);
        let failed = ruling.outcome.as_ref().map_or(true, |o| o.degraded.is_some());
        let recorded = (independent || failed).then_some(ruling);
        let decided = decided.map(|d| {
            for (&i, d) in live.iter().zip(d) {
                out[i] = Some(d);
            }
            out
        });
        return (recorded, decided);
    }
    let mut ruling = rule(snap, pick(live, None)).await;
    let outcome = match &ruling.outcome {
        Ok(o) => o,
        Err(e) => {
            let status = store_status(e);
            return (Some(ruling), Err(status));
        }
    };
    // Of a denied request, the checks that admitted were charged nothing (and a store may
    // not even have consulted them: Redis's deny cache), nor were shadow checks: ask what
    // they hold, at no cost.
    let mut peek = Vec::new();
    for (j, &i) in live.iter().enumerate() {
        let d = outcome.decisions[j];
        let shadow = snap.policies[checks[i].policy].shadow;
        if outcome.not_evaluated.contains(&j) || (!outcome.allowed && d.allowed && !shadow) {
            peek.push(i);
        } else {
            out[i] = Some(d);
        }
    }
    if !peek.is_empty() {
        let peeked = rule(snap, pick(&peek, Some(0))).await;
        match peeked.outcome {
            Ok(o) => {
                for (&i, d) in peek.iter().zip(o.decisions) {
                    out[i] = Some(d);
                }
            }
            // The answer fails: so does the request's decision, counted as the store's error.
            Err(e) => {
                let status = store_status(&e);
                ruling.outcome = Err(e);
                return (Some(ruling), Err(status));
            }
        }
    }
    (Some(ruling), Ok(out))
}

/// The status a store failure is answered with.
pub(crate) fn store_status(e: &StoreError) -> Status {
    Status::unavailable(format!("the store could not decide: {e}"))
}

/// One pipeline call for `checks`.
async fn rule(snap: &Snapshot, checks: Vec<Check>) -> Ruling<'_> {
    let n = checks.len();
    snap.limiter.decide(Checks::new(checks, vec!["rls"; n])).await
}
