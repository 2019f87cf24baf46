//! Refunds, overruns and settlements, over explicit time: what each algorithm gives back, the
//! debt it holds, and the bounds that still hold with both (proptest).

use proptest::collection::vec;
use proptest::prelude::*;
use sluice_core::{
    Algorithm, FixedWindow, LeakMode, LeakyBucket, NANOS_PER_SEC, Nanos, Policy, SlidingLog, SlidingWindow,
    TokenBucket, fuzz_cases,
};

const S: Nanos = NANOS_PER_SEC;

#[test]
fn fixed_window_gives_back_while_the_window_lasts() {
    let fw = FixedWindow::new(5, 10 * S).unwrap();
    let mut s = Default::default();
    assert_eq!(fw.check(&mut s, 2 * S, 3).unwrap().remaining, 2);
    fw.refund(&mut s, 2 * S, 2, 4 * S);
    assert_eq!(fw.peek(&s, 4 * S, 1).unwrap().remaining, 3, "two of three back");
    // A charge of a window that is over gives nothing back in the next one.
    let mut s = Default::default();
    fw.check(&mut s, 9 * S, 5).unwrap();
    fw.check(&mut s, 11 * S, 4).unwrap();
    fw.refund(&mut s, 9 * S, 5, 12 * S);
    assert_eq!(fw.peek(&s, 12 * S, 1).unwrap().remaining, 0, "the new window's 4, and this one");
}

#[test]
fn fixed_window_debt_lasts_until_the_window_ends() {
    let fw = FixedWindow::new(5, 10 * S).unwrap();
    let mut s = Default::default();
    fw.check(&mut s, S, 2).unwrap();
    fw.settle(&mut s, S, 2, 9, 3 * S); // 7 more than reserved: 9 of 5
    let d = fw.peek(&s, 3 * S, 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.retry_after, 7 * S);
    assert!(fw.check(&mut s, 10 * S, 5).unwrap().allowed, "a new window forgives the debt");
}

#[test]
fn sliding_window_gives_back_to_the_window_charged() {
    let sw = SlidingWindow::new(10, 10 * S).unwrap();
    let mut s = Default::default();
    sw.check(&mut s, 5 * S, 6).unwrap();
    sw.check(&mut s, 15 * S, 1).unwrap(); // the next window: 6 weigh half
    assert_eq!(sw.peek(&s, 15 * S, 0).unwrap().remaining, 6);
    sw.refund(&mut s, 5 * S, 4, 15 * S); // given back to the previous window's count
    assert_eq!(sw.peek(&s, 15 * S, 0).unwrap().remaining, 8);
    sw.refund(&mut s, 15 * S, 1, 15 * S);
    assert_eq!(sw.peek(&s, 15 * S, 0).unwrap().remaining, 9);
    // Two windows on, the charge weighs nothing: nothing to give back, and nothing taken from others.
    sw.check(&mut s, 25 * S, 3).unwrap();
    sw.refund(&mut s, 5 * S, 2, 25 * S);
    assert_eq!(sw.peek(&s, 25 * S, 0).unwrap().remaining, 7);
}

#[test]
fn sliding_log_removes_the_charge_while_it_is_in_the_window() {
    let log = SlidingLog::new(4, 10 * S).unwrap();
    let mut s = Default::default();
    log.check(&mut s, S, 2).unwrap();
    log.check(&mut s, 2 * S, 2).unwrap();
    log.refund(&mut s, S, 2, 3 * S);
    let d = log.peek(&s, 3 * S, 2).unwrap();
    assert!(d.allowed);
    assert_eq!(s.len(), 2, "the entries stamped at 1 s are gone");
    // Once the charge left the window, a refund takes nothing, not even later entries.
    log.check(&mut s, 11 * S, 1).unwrap();
    log.refund(&mut s, 2 * S, 2, 12 * S);
    assert_eq!(log.peek(&s, 12 * S, 0).unwrap().remaining, 3);
}

#[test]
fn sliding_log_holds_at_most_the_limit_however_large_the_overrun() {
    let log = SlidingLog::new(4, 10 * S).unwrap();
    let mut s = Default::default();
    log.check(&mut s, 0, 1).unwrap();
    log.settle(&mut s, 0, 1, 1_000_000, 0);
    assert_eq!(s.len(), 4);
    let d = log.peek(&s, S, 1).unwrap();
    assert_eq!(d.retry_after, 9 * S, "denied for the rest of one window, no longer");
}

#[test]
fn token_bucket_refund_is_exact_for_the_last_charge() {
    let tb = TokenBucket::new(10, 1.0).unwrap();
    let mut s = Default::default();
    tb.check(&mut s, 0, 4).unwrap();
    let before = s;
    tb.check(&mut s, S, 3).unwrap();
    tb.refund(&mut s, S, 3, 2 * S);
    for t in [2 * S, 3 * S, 20 * S] {
        assert_eq!(tb.peek(&s, t, 1), tb.peek(&before, t, 1));
    }
}

#[test]
fn token_bucket_refund_behind_a_later_charge_gives_back_the_refill_in_between() {
    // One token every 10 s. A charged at 0, B at 8 s; refunding A moves the bucket back by one
    // token, to where it would be had A never come and B come at 0 (10 s), not at 8 s (18 s).
    let tb = TokenBucket::new(1, 0.1).unwrap();
    let mut s = Default::default();
    assert!(tb.check(&mut s, 0, 1).unwrap().allowed);
    assert!(!tb.check(&mut s, 8 * S, 1).unwrap().allowed);
    let tb = TokenBucket::new(2, 0.1).unwrap();
    let mut s = Default::default();
    tb.check(&mut s, 0, 1).unwrap();
    tb.check(&mut s, 8 * S, 1).unwrap();
    tb.refund(&mut s, 0, 1, 9 * S);
    assert_eq!(tb.peek(&s, 9 * S, 1).unwrap().remaining, 0);
    assert_eq!(tb.peek(&s, 10 * S, 1).unwrap().remaining, 1, "full at 10 s where a lone B would be at 18 s");
}

#[test]
fn token_bucket_debt_is_paid_back_at_the_rate() {
    let tb = TokenBucket::new(10, 2.0).unwrap();
    let mut s = Default::default();
    tb.check(&mut s, 0, 10).unwrap();
    tb.settle(&mut s, 0, 10, 16, 0); // 6 tokens of debt: 3 s at 2 per second
    let d = tb.peek(&s, S, 1).unwrap();
    assert_eq!(d.retry_after, 2 * S + S / 2, "the debt, then one token");
    assert!(tb.peek(&s, 3 * S + S / 2, 1).unwrap().allowed);
}

#[test]
fn a_debt_is_at_most_one_limit() {
    // 20 tokens over a bucket of 10: owed 10 (5 s at 2 per second), the rest forgiven.
    let tb = TokenBucket::new(10, 2.0).unwrap();
    let mut s = Default::default();
    tb.check(&mut s, 0, 10).unwrap();
    tb.settle(&mut s, 0, 10, 30, 0);
    assert_eq!(tb.peek(&s, 0, 1).unwrap().retry_after, 5 * S + S / 2);
    // The windows: twice the limit counted at most.
    let fw = FixedWindow::new(5, 10 * S).unwrap();
    let mut s = Default::default();
    fw.settle(&mut s, 0, 0, 1_000, 0);
    fw.refund(&mut s, 0, 5, 0);
    assert_eq!(fw.peek(&s, 0, 1).unwrap().remaining, 0, "10 counted, 5 back: at the limit");
    let sw = SlidingWindow::new(5, 10 * S).unwrap();
    let mut s = Default::default();
    sw.settle(&mut s, 0, 0, 1_000, 0);
    sw.refund(&mut s, 0, 7, 0);
    assert_eq!(sw.peek(&s, 0, 1).unwrap().remaining, 1, "10 counted, 7 back, 1 for this request");
}

#[test]
fn leaky_bucket_shaping_refund_shortens_the_next_delay() {
    let lb = LeakyBucket::new(1.0, 5, LeakMode::Shape { delay: 0 }).unwrap();
    let mut s = Default::default();
    for _ in 0..3 {
        lb.check(&mut s, 0, 1).unwrap();
    }
    assert_eq!(lb.peek(&s, 0, 1).unwrap().delay, 3 * S);
    lb.refund(&mut s, 0, 2, 0);
    assert_eq!(lb.peek(&s, 0, 1).unwrap().delay, S);
}

/// A charge of the window property: when, units still charged, whether it was an overrun.
type Charge = (Nanos, u64, bool);

/// Every algorithm with `limit` and a window (or a refill of `limit` per window).
fn policies(limit: u64, window: Nanos) -> Vec<Policy> {
    let rate = limit as f64 * S as f64 / window as f64;
    vec![
        FixedWindow::new(limit, window).unwrap().into(),
        SlidingLog::new(limit, window).unwrap().into(),
        SlidingWindow::new(limit, window).unwrap().into(),
        TokenBucket::new(limit, rate).unwrap().into(),
        LeakyBucket::new(rate, limit, LeakMode::Police).unwrap().into(),
        LeakyBucket::new(rate, limit, LeakMode::Shape { delay: limit / 2 }).unwrap().into(),
    ]
}

/// Gaps that land at one instant, a nanosecond or two apart, or anywhere up to two windows.
fn gap(window: Nanos, seed: u64) -> Nanos {
    match seed % 4 {
        0 => 0,
        1 => (seed >> 2) % 3,
        _ => (seed >> 2) % (2 * window + 1),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases(3_000)))]

    /// A refund of the last charge, before anything else is charged, leaves a state that decides
    /// every later request, of every cost, as the state before that charge: for every algorithm.
    #[test]
    fn a_refund_undoes_the_last_charge(
        limit in 1..=6u64,
        window in prop_oneof![1..=50u64, S..=20 * S],
        history in vec((any::<u64>(), any::<u64>()), 0..30),
        last in (any::<u64>(), 1..=6u64),
        refund_gap in any::<u64>(),
        probes in vec(any::<u64>(), 1..8),
    ) {
        for p in policies(limit, window) {
            let mut s = p.fresh_state();
            let mut t: Nanos = 1_000;
            for &(g, c) in &history {
                t += gap(window, g);
                p.check(&mut s, t, c % (limit + 1)).unwrap();
            }
            t += gap(window, last.0);
            let cost = last.1.min(limit);
            let before = s.clone();
            if !p.check(&mut s, t, cost).unwrap().allowed {
                continue;
            }
            let charged_at = t;
            let now = t + gap(window, refund_gap);
            p.refund(&mut s, charged_at, cost, now);
            for &probe in &probes {
                let at = now + gap(window, probe);
                for c in 0..=limit {
                    prop_assert_eq!(p.peek(&s, at, c), p.peek(&before, at, c), "{} at {}, cost {}", p.name(), at, c);
                }
            }
        }
    }

    /// Token and leaky buckets with any mix of checks, refunds (of earlier admitted charges, once,
    /// in part or whole) and overruns: in every interval [a, b], what checks admitted minus what
    /// was refunded is at most `capacity + (b - a) / interval`, whatever the overruns.
    #[test]
    fn buckets_admit_within_their_bound_with_refunds_and_overruns(
        capacity in 1..=6u64,
        interval in prop_oneof![1..=20u64, S / 10..=2 * S],
        ops in vec((any::<u64>(), any::<u64>(), any::<u64>()), 1..80),
    ) {
        let rate = S as f64 / interval as f64;
        let algs: [Policy; 2] = [
            TokenBucket::new(capacity, rate).unwrap().into(),
            LeakyBucket::new(rate, capacity, LeakMode::Shape { delay: 0 }).unwrap().into(),
        ];
        for p in algs {
            let t_per = match p {
                Policy::TokenBucket(b) => b.interval(),
                Policy::LeakyBucket(b) => b.interval(),
                _ => unreachable!("only buckets here"),
            };
            let mut s = p.fresh_state();
            let mut t: Nanos = 0;
            // (time, signed units): admitted checks positive, refunds negative.
            let mut ledger: Vec<(Nanos, i128)> = Vec::new();
            // Admitted charges not yet refunded: (time, cost).
            let mut open: Vec<(Nanos, u64)> = Vec::new();
            for &(g, kind, amount) in &ops {
                t += gap(capacity * t_per, g);
                match kind % 4 {
                    0 | 1 => {
                        let cost = 1 + amount % capacity;
                        if p.check(&mut s, t, cost).unwrap().allowed {
                            ledger.push((t, cost as i128));
                            open.push((t, cost));
                        }
                    }
                    2 if !open.is_empty() => {
                        let (at, cost) = open.swap_remove(amount as usize % open.len());
                        let back = 1 + (amount >> 8) % cost;
                        p.refund(&mut s, at, back, t);
                        ledger.push((t, -(back as i128)));
                    }
                    _ => p.overrun(&mut s, t, 1 + amount % (3 * capacity)),
                }
            }
            for i in 0..ledger.len() {
                let mut net = 0i128;
                for j in i..ledger.len() {
                    net += ledger[j].1;
                    let span = (ledger[j].0 - ledger[i].0) as i128;
                    prop_assert!((net - capacity as i128) * t_per as i128 <= span,
                        "{}: {} net units in [{}, {}]", p.name(), net, ledger[i].0, ledger[j].0);
                }
            }
        }
    }

    /// Window algorithms with checks, refunds and overruns: what checks admitted in the current
    /// fixed window, net of refunds, is at most the limit (overruns only take room from them);
    /// the sliding log holds at most the limit, and the checks' units in any window, net of
    /// refunds, are within it.
    #[test]
    fn windows_admit_within_their_limit_with_refunds_and_overruns(
        limit in 1..=6u64,
        window in prop_oneof![1..=50u64, S..=20 * S],
        ops in vec((any::<u64>(), any::<u64>(), any::<u64>()), 1..80),
    ) {
        let fw = FixedWindow::new(limit, window).unwrap();
        let log = SlidingLog::new(limit, window).unwrap();
        let (mut fs, mut ls) = (Default::default(), Default::default());
        let mut t: Nanos = 0;
        // Per algorithm: (time charged, units still charged, overrun?) of each charge.
        let (mut fw_charges, mut log_charges): (Vec<Charge>, Vec<Charge>) = Default::default();
        for &(g, kind, amount) in &ops {
            t += gap(window, g);
            let cost = 1 + amount % limit;
            match kind % 4 {
                0 | 1 => {
                    if fw.check(&mut fs, t, cost).unwrap().allowed {
                        fw_charges.push((t, cost, false));
                    }
                    if log.check(&mut ls, t, cost).unwrap().allowed {
                        log_charges.push((t, cost, false));
                    }
                }
                2 => {
                    if let Some(c) = fw_charges.iter_mut().filter(|c| !c.2 && c.1 > 0).nth(amount as usize % 3) {
                        let back = 1 + (amount >> 8) % c.1;
                        fw.refund(&mut fs, c.0, back, t);
                        // Given back only while the window it was charged in lasts.
                        if c.0 - c.0 % window == t - t % window {
                            c.1 -= back;
                        }
                    }
                    if let Some(c) = log_charges.iter_mut().filter(|c| !c.2 && c.1 > 0).nth(amount as usize % 3) {
                        let back = 1 + (amount >> 8) % c.1;
                        log.refund(&mut ls, c.0, back, t);
                        if c.0 + window > t {
                            c.1 -= back;
                        }
                    }
                }
                _ => {
                    fw.overrun(&mut fs, t, cost);
                    fw_charges.push((t, cost, true));
                    log.overrun(&mut ls, t, cost);
                }
            }
            // The fixed window: checks in the current window, net of refunds, plus overruns.
            let start = t - t % window;
            let (checked, overrun) = fw_charges.iter().filter(|c| c.0 >= start).fold((0, 0), |(a, o), c| {
                if c.2 { (a, o + c.1) } else { (a + c.1, o) }
            });
            prop_assert!(checked <= limit, "fixed window: {} admitted beside {} overrun", checked, overrun);
            // The sliding log: no more than the limit live, and the checks' live units within it.
            prop_assert!(ls.len() as u64 <= limit);
            let live: u64 = log_charges.iter().filter(|c| c.0 + window > t).map(|c| c.1).sum();
            prop_assert!(live <= limit, "sliding log: {} live units", live);
        }
    }
}
