//! `sluice simulate --instances N`: several gateway instances over one shared store, each with
//! its own pipeline and its own quota leases (as `lease = "auto"` asks), against one exact
//! limiter deciding the same requests on a store of its own: what the leases cost in
//! admissions (under-admission), and the store calls they save.
//!
//! Every store reads the simulation's one clock, the log's time. The instances' stores are
//! [`LeasedStore`]s built as the gateway builds its own (the policies that say `lease = "auto"`,
//! the default [`LeaseOptions`]) over one [`MemoryStore`]; a policy without leases goes to that
//! store on every request, as it does live.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use sluice_config::Config;
use sluice_core::{ManualClock, Nanos, Policy};
use sluice_gateway::stores::{memory_options, named_policies};
use sluice_http::pipeline::Limiter;
use sluice_sim::{
    AccessResults, InstanceRow, InstancesReport, Judge, Judgement, LimitComparison, LimitVerdict, LogRequest,
    RequestVerdict,
};
use sluice_store::{KeyHash, KeyHasher, LeaseOptions, LeasedStore, MemoryStore, Store};

use super::judge::{ConfigJudge, block_on_here};

/// Which instance decides a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// In turn, as a round-robin load balancer.
    RoundRobin,
    /// By the address that connected (the log's peer), as a load balancer hashing the source
    /// address: a client always meets the same instance.
    Client,
    /// One log per instance: the log a request was read from.
    Log,
}

impl Split {
    /// As the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Split::RoundRobin => "round-robin",
            Split::Client => "client",
            Split::Log => "log",
        }
    }
}

/// One instance: its pipeline, and its leases over the shared store.
struct Instance {
    judge: ConfigJudge,
    store: Arc<LeasedStore>,
    requests: u64,
    admitted: u64,
}

/// What one limit of a route did in the two runs.
#[derive(Debug, Default, Clone)]
struct Tally {
    requests: u64,
    admitted: u64,
    admitted_exact: u64,
    over: u64,
}

/// Checks that a leased limit never admits beyond its window's limit, or its bucket's bound: a
/// leased limit of a fixed cost (a cost read from the response may settle below it).
#[derive(Debug, Clone, Copy)]
struct Bound {
    policy: usize,
    window: Policy,
    cost: u64,
}

/// The instances and the exact limiter, deciding each request of the log: the judge of a
/// multi-instance run. What it answers the run with is the instances' decision.
pub struct Fleet {
    exact: ConfigJudge,
    instances: Vec<Instance>,
    split: Split,
    /// Requests split so far (round-robin's turn).
    turn: usize,
    /// Per route and limit.
    tally: Vec<Vec<Tally>>,
    /// Per route and limit: the bound checked, for leased limits.
    bounds: Vec<Vec<Option<Bound>>>,
    /// Per leased policy and key: the window's start and the units admitted in it by the
    /// instances together.
    windows: HashMap<(usize, KeyHash), (Nanos, u64)>,
    /// Per leased bucket policy and key: the theoretical arrival time of a bucket charged every
    /// admission of the instances together.
    buckets: HashMap<(usize, KeyHash), Nanos>,
    /// Requests the instances admitted, and the exact limiter.
    admitted: u64,
    admitted_exact: u64,
    /// The names of the leased policies.
    leased_names: Vec<String>,
    /// How the instances lease: the gateway's defaults, or a region's ([`region_leases`]).
    options: LeaseOptions,
    /// When the instances next give back the leases of keys gone quiet, as the gateway's timer
    /// does every [`LeaseOptions::idle`].
    next_return: Nanos,
}

/// The leases of a region (`--regions`): every leased policy from its first request, each
/// lease a trade covering `trade_every` of the region's traffic and given back after as long
/// without traffic, and a region whose share is gone denies on its own until the window ends
/// (nothing crosses regions per request).
pub fn region_leases(trade_every: Nanos) -> LeaseOptions {
    LeaseOptions {
        min_rate: 0.0,
        cover: trade_every,
        deny_when_full: true,
        idle: trade_every,
        ..LeaseOptions::default()
    }
}

impl Fleet {
    /// `n` instances of `config` split by `split`, leasing as `options` say (the gateway's
    /// [`LeaseOptions::default`], or [`region_leases`]), and the exact limiter; keys hashed with
    /// `secret`; the log carries `log_headers`.
    pub fn new(
        config: &Config,
        (n, split, options): (usize, Split, LeaseOptions),
        secret: &str,
        log_headers: &[String],
    ) -> Self {
        let clock = Arc::new(ManualClock::new(0));
        let hasher = || KeyHasher::from_secret(secret.as_bytes());
        let store = |clock: &Arc<ManualClock>| {
            Arc::new(MemoryStore::new(named_policies(config), memory_options(&config.store), clock.clone()))
        };
        let exact_store: Arc<dyn Store> = store(&clock);
        let exact = ConfigJudge::new(
            config.clone(),
            Limiter::of_config(config, exact_store, hasher()),
            clock.clone(),
            log_headers,
        );
        let shared: Arc<dyn Store> = store(&clock);
        let leased = config.leased_policies();
        let instances = (0..n)
            .map(|_| {
                // As the gateway wraps its store (a region as designed in docs/src/scaling.md);
                // with no policy leased, a LeasedStore only counts the calls.
                let leases = Arc::new(LeasedStore::new(shared.clone(), leased.clone(), options, clock.clone()));
                let limiter = Limiter::of_config(config, leases.clone(), hasher());
                Instance {
                    judge: ConfigJudge::new(config.clone(), limiter, clock.clone(), log_headers),
                    store: leases,
                    requests: 0,
                    admitted: 0,
                }
            })
            .collect();
        let is_leased =
            |p: usize| leased.get(p).copied().unwrap_or(false) && sluice_store::leasable(&config.policies[p].policy);
        let bounds = config
            .routes
            .iter()
            .map(|r| {
                r.limits
                    .iter()
                    .map(|l| {
                        let p = &config.policies[l.policy];
                        (is_leased(l.policy) && l.cost_from.is_none() && !p.shadow && !p.soft).then_some(Bound {
                            policy: l.policy,
                            window: p.policy,
                            cost: l.cost,
                        })
                    })
                    .collect()
            })
            .collect();
        let tally = config.routes.iter().map(|r| vec![Tally::default(); r.limits.len()]).collect();
        let leased_names =
            config.policies.iter().enumerate().filter(|(i, _)| is_leased(*i)).map(|(_, p)| p.name.clone()).collect();
        Self {
            exact,
            instances,
            split,
            turn: 0,
            tally,
            bounds,
            windows: HashMap::new(),
            buckets: HashMap::new(),
            admitted: 0,
            admitted_exact: 0,
            leased_names,
            options,
            next_return: 0,
        }
    }

    /// The instance that decides `r`.
    fn pick(&mut self, r: &LogRequest) -> usize {
        let n = self.instances.len();
        match self.split {
            Split::RoundRobin => {
                self.turn += 1;
                (self.turn - 1) % n
            }
            Split::Client => {
                // SipHash with fixed keys: the same split on every run.
                let mut h = DefaultHasher::new();
                r.peer.hash(&mut h);
                (h.finish() % n as u64) as usize
            }
            Split::Log => r.source.min(n - 1),
        }
    }

    /// The prediction, once `results` (the run's counts) are in.
    pub fn report(&self, results: &AccessResults) -> InstancesReport {
        let mut limits = Vec::new();
        for (route, tallies) in results.routes.iter().zip(&self.tally) {
            if route.info.not_simulable.is_some() {
                continue;
            }
            for (info, t) in route.info.limits.iter().zip(tallies) {
                limits.push(LimitComparison {
                    route: route.info.name.clone(),
                    policy: info.policy_name.clone(),
                    leased: self.leased_names.contains(&info.policy_name),
                    requests: t.requests,
                    admitted: t.admitted,
                    admitted_exact: t.admitted_exact,
                    under_admitted: t.admitted_exact as i64 - t.admitted as i64,
                    over_admitted: t.over,
                });
            }
        }
        let decisions: u64 = self.instances.iter().map(|i| i.requests).sum();
        let store_calls: u64 = self.instances.iter().map(|i| i.store.store_calls()).sum();
        InstancesReport {
            instances: self.instances.len(),
            split: self.split.name().into(),
            trade_every_ms: self.options.deny_when_full.then_some(self.options.cover / 1_000_000),
            leased_policies: self.leased_names.clone(),
            over_admitted: limits.iter().map(|l| l.over_admitted).sum(),
            limits,
            admitted: self.admitted,
            admitted_exact: self.admitted_exact,
            under_admitted: self.admitted_exact as i64 - self.admitted as i64,
            decisions,
            store_calls,
            store_calls_per_decision: if decisions == 0 { 0.0 } else { store_calls as f64 / decisions as f64 },
            per_instance: self
                .instances
                .iter()
                .enumerate()
                .map(|(i, inst)| InstanceRow {
                    instance: i,
                    requests: inst.requests,
                    admitted: inst.admitted,
                    admitted_from_leases: inst.store.admitted_locally(),
                    store_calls: inst.store.store_calls(),
                    held_at_end: inst.store.held(),
                })
                .collect(),
        }
    }
}

impl Judge for Fleet {
    fn judge(&mut self, r: &LogRequest, at: Nanos) -> Judgement<'_> {
        // The exact limiter first: its verdicts are only counted.
        if let Judgement::Decided { route, verdict, limits } = self.exact.judge(r, at) {
            self.admitted_exact += u64::from(verdict == RequestVerdict::Admitted);
            if let Some(tallies) = self.tally.get_mut(route) {
                for (t, d) in tallies.iter_mut().zip(limits) {
                    t.admitted_exact += u64::from(d.verdict == LimitVerdict::Allowed);
                }
            }
        }
        // The shared clock reads `at` now (the exact judge set it).
        if at >= self.next_return {
            for instance in &self.instances {
                block_on_here(instance.store.return_idle());
            }
            self.next_return = at.saturating_add(self.options.idle);
        }
        let i = self.pick(r);
        let instance = &mut self.instances[i];
        let judgement = instance.judge.judge(r, at);
        if let Judgement::Decided { route, verdict, limits } = judgement {
            instance.requests += 1;
            let admitted = verdict == RequestVerdict::Admitted;
            instance.admitted += u64::from(admitted);
            self.admitted += u64::from(admitted);
            if let (Some(tallies), Some(bounds)) = (self.tally.get_mut(route), self.bounds.get(route)) {
                for ((t, d), bound) in tallies.iter_mut().zip(limits).zip(bounds) {
                    t.requests += u64::from(d.verdict != LimitVerdict::NotEvaluated);
                    t.admitted += u64::from(d.verdict == LimitVerdict::Allowed);
                    // Charged only when the request is admitted (a store decides a request's
                    // checks together).
                    let (Some(b), true) = (bound, admitted) else { continue };
                    let bucket = match b.window {
                        Policy::TokenBucket(t) => Some((t.capacity(), t.interval())),
                        Policy::LeakyBucket(l) => Some((l.capacity(), l.interval())),
                        _ => None,
                    };
                    if let Some((capacity, interval)) = bucket {
                        // Every admission charged to a bucket of the policy's own, admitted or
                        // not: past its depth, some interval admitted more than `capacity +
                        // length / interval`.
                        let tat = self.buckets.entry((b.policy, d.key)).or_insert(0);
                        *tat = (*tat).max(at).saturating_add(b.cost.saturating_mul(interval));
                        if *tat - at > capacity.saturating_mul(interval) {
                            t.over += 1;
                        }
                        continue;
                    }
                    let Policy::FixedWindow(w) = b.window else { continue };
                    let (start, _) = w.bounds(at);
                    let entry = self.windows.entry((b.policy, d.key)).or_insert((start, 0));
                    if entry.0 != start {
                        *entry = (start, 0);
                    }
                    entry.1 += b.cost;
                    if entry.1 > b.window.limit() {
                        t.over += 1;
                    }
                }
            }
        }
        judgement
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::judge::route_infos;
    use sluice_core::NANOS_PER_SEC;
    use sluice_sim::{AccessOptions, JsonFields, LogFormat, LogSource, Quiet, SIMULATION_KEY_SECRET, run_access_logs};

    /// The top of an hour (Unix seconds), so that an hour-long window holds a whole test.
    const HOUR: u64 = 472_223 * 3600;
    const T0: Nanos = (HOUR + 10) * NANOS_PER_SEC;

    /// A gateway with one route whose limit is `policy` (TOML lines), keyed on `key`.
    fn config(policy: &str, key: &str) -> Config {
        let text = format!(
            r#"[server]
key_secret = "shared-by-every-instance-0123456789"

[store]
kind = "redis"
url = "redis://127.0.0.1:1"
on_error = "fail-closed"

[[policy]]
name = "hot"
{policy}

[[route]]
path = "/api/*"
limits = [{{ policy = "hot", key = "{key}" }}]
"#
        );
        sluice_config::parse("test.toml", &text).unwrap()
    }

    fn fixed(limit: u64, window: &str, lease: &str) -> Config {
        config(
            &format!("algorithm = \"fixed-window\"\nlimit = {limit}\nwindow = \"{window}\"\nlease = \"{lease}\""),
            "const:everyone",
        )
    }

    /// A JSON log line: a GET of /api/x from `ip` at `at`.
    fn line(at: Nanos, ip: &str) -> String {
        let secs = format!("{}.{:09}", at / NANOS_PER_SEC, at % NANOS_PER_SEC);
        format!("{{\"time\":{secs},\"remote_addr\":\"{ip}\",\"request_method\":\"GET\",\"request_uri\":\"/api/x\"}}\n")
    }

    /// `n` requests from `ip`, `every` apart from `from`.
    fn steady(from: Nanos, n: u64, every: Nanos, ip: &str) -> String {
        (0..n).map(|i| line(from + i * every, ip)).collect()
    }

    /// Runs `logs` (one per instance when several) through `n` instances of `config`.
    fn run(config: &Config, logs: &[String], n: usize, split: Split) -> InstancesReport {
        run_leasing(config, logs, (n, split, LeaseOptions::default()))
    }

    /// [`run`], the instances leasing as `options` say.
    fn run_leasing(config: &Config, logs: &[String], of: (usize, Split, LeaseOptions)) -> InstancesReport {
        let format = LogFormat::Json("".parse::<JsonFields>().unwrap());
        let mut fleet = Fleet::new(config, of, SIMULATION_KEY_SECRET, &format.header_names());
        let mut sources: Vec<LogSource> = logs
            .iter()
            .map(|l| LogSource::from_reader(std::io::Cursor::new(l.clone().into_bytes()), None).unwrap())
            .collect();
        let results = run_access_logs(
            &mut sources,
            &format,
            route_infos(config),
            &AccessOptions::default(),
            &mut fleet,
            &mut Quiet,
        )
        .unwrap();
        assert_eq!(results.malformed, 0, "{:?}", results.malformed_lines);
        let report = fleet.report(&results);
        // The run's own counts are the instances'.
        assert_eq!(results.routes[0].admitted, report.admitted);
        report
    }

    #[test]
    fn a_hot_key_split_round_robin_admits_exactly_the_limit_every_window() {
        // 1,000 requests a second for 5 s over 4 instances, 100 a second allowed: each instance
        // sees 250 a second, above the 50 at which it leases; every instance keeps receiving
        // requests after the window's units are all leased, so it spends every unit it holds
        // before the window ends: nothing is stranded, and 100 are admitted every window.
        let config = fixed(100, "1s", "auto");
        let log = steady(T0, 5_000, NANOS_PER_SEC / 1_000, "10.0.0.1");
        let r = run(&config, &[log], 4, Split::RoundRobin);
        assert_eq!((r.admitted, r.admitted_exact, r.under_admitted, r.over_admitted), (500, 500, 0, 0), "{r:?}");
        assert_eq!(r.per_instance.iter().map(|i| i.requests).collect::<Vec<_>>(), [1_250; 4]);
        // From the second second on (the first has no rate yet), every admission comes from a
        // lease: 400 of the 500. Denials go to the store, one call each.
        assert_eq!(r.per_instance.iter().map(|i| i.admitted_from_leases).sum::<u64>(), 400, "{r:?}");
        assert!(r.store_calls < r.decisions, "{r:?}");
        assert_eq!(r.leased_policies, ["hot"]);
        let l = &r.limits[0];
        assert_eq!((l.leased, l.requests, l.admitted, l.admitted_exact), (true, 5_000, 500, 500));
    }

    #[test]
    fn an_instance_that_stops_after_a_burst_strands_its_lease_and_the_prediction_says_so() {
        // Instance 0 (the first log): 200 requests in 0.2 s, leasing once it sees 50 a second,
        // then nothing. Instance 1: 2,000 a second for half a second, later in the same hour.
        // One exact limiter admits the limit, 500; the instances admit 500 minus what instance
        // 0's last lease still holds, counted by the store and spent by no one.
        let config = fixed(500, "1h", "auto");
        let a = steady(T0, 200, NANOS_PER_SEC / 1_000, "10.0.0.1");
        let b = steady(T0 + NANOS_PER_SEC, 1_000, NANOS_PER_SEC / 2_000, "10.0.0.2");
        let r = run(&config, &[a, b], 2, Split::Log);
        let held = r.per_instance[0].held_at_end;
        assert!(held > 0, "instance 0 stopped with units in hand: {r:?}");
        assert_eq!(r.per_instance[1].held_at_end, 0, "instance 1 spent all it leased: {r:?}");
        assert_eq!((r.admitted_exact, r.admitted), (500, 500 - held), "{r:?}");
        assert_eq!((r.under_admitted, r.over_admitted), (held as i64, 0));
        assert_eq!((r.per_instance[0].requests, r.per_instance[0].admitted), (200, 200));
        // One log per instance: the split follows the logs, whatever the addresses.
        assert_eq!(r.split, "log");
    }

    #[test]
    fn regions_trade_shares_and_deny_on_their_own_once_the_limit_is_spent() {
        // Two regions, 100 a second allowed in all: the first sees 450 requests a second, the
        // second 50, for 4 s. As regions, each leases its share in trades of a second of its
        // traffic and denies by itself once the window has no share left for it: over nothing,
        // under at most what a quiet region holds when a window ends, and the calls that cross
        // regions a few a second, not one a denial as gateways' leases make them.
        let config = fixed(100, "1s", "auto");
        let busy = steady(T0, 1_800, NANOS_PER_SEC / 450, "10.0.0.1");
        let quiet = steady(T0 + 1, 200, NANOS_PER_SEC / 50, "10.0.0.2");
        let logs = [busy, quiet];
        let regions = run_leasing(&config, &logs, (2, Split::Log, region_leases(NANOS_PER_SEC)));
        let gateways = run(&config, &logs, 2, Split::Log);
        assert_eq!(regions.over_admitted, 0, "{regions:?}");
        assert_eq!(regions.admitted_exact, 400, "four windows of 100");
        assert!(regions.under_admitted >= 0, "{regions:?}");
        assert!(regions.admitted >= 300, "most of each window admitted: {regions:?}");
        assert!(
            regions.store_calls * 20 <= gateways.store_calls,
            "regions {} calls across, gateways {} calls to the store",
            regions.store_calls,
            gateways.store_calls
        );
        assert!(regions.store_calls_per_decision < 0.05, "{regions:?}");
        assert_eq!(regions.trade_every_ms, Some(1_000));
        assert_eq!(gateways.trade_every_ms, None);
        let table = regions.to_table();
        assert!(table.starts_with("regions: 2, one access log per instance;"), "{table}");
    }

    #[test]
    fn a_client_split_sends_each_address_to_one_instance() {
        // Two clients, 300 requests each over a second: each meets one instance only (the
        // split is by address), so the other instance, if any, decides nothing of theirs.
        let config = fixed(1_000, "1h", "auto");
        let mut log = String::new();
        for i in 0..300 {
            log.push_str(&line(T0 + i * NANOS_PER_SEC / 300, "10.0.0.1"));
            log.push_str(&line(T0 + i * NANOS_PER_SEC / 300 + 1, "10.0.0.2"));
        }
        let r = run(&config, &[log], 3, Split::Client);
        let requests: Vec<u64> = r.per_instance.iter().map(|i| i.requests).collect();
        assert_eq!(requests.iter().sum::<u64>(), 600);
        assert!(requests.iter().all(|&n| n % 300 == 0), "whole clients per instance: {requests:?}");
        // Nothing reaches the limit: all admitted, exactly as one limiter.
        assert_eq!((r.admitted, r.admitted_exact, r.under_admitted), (600, 600, 0));
    }

    #[test]
    fn without_leases_the_instances_admit_exactly_what_one_limiter_does() {
        let config = fixed(100, "1s", "off");
        let log = steady(T0, 3_000, NANOS_PER_SEC / 1_000, "10.0.0.1");
        let r = run(&config, &[log], 4, Split::RoundRobin);
        assert!(r.leased_policies.is_empty());
        assert_eq!((r.admitted, r.admitted_exact, r.under_admitted, r.over_admitted), (300, 300, 0, 0));
        // One store call a decision, as one limiter.
        assert_eq!((r.store_calls, r.decisions), (3_000, 3_000));
        assert!(r.to_table().contains("no policy has lease = \"auto\""), "{}", r.to_table());
    }

    /// Random arrivals of three clients (keyed per address), split over 1 to 4 instances in
    /// turn or by client, 48 seeded runs: no leased window admits beyond its limit, and the
    /// instances never admit more than one exact limiter (a fixed window alone on its route
    /// admits the first `limit` requests of a window; the instances, at most `limit` of them).
    #[test]
    fn leases_never_over_admit_and_never_beat_the_exact_limiter() {
        let mut under = 0;
        for seed in 0..48 {
            let mut rng = sluice_sim::Rng::new(seed);
            let limit = 1 + rng.below(60);
            let n = 1 + rng.below(4) as usize;
            let split = if rng.below(2) == 0 { Split::Client } else { Split::RoundRobin };
            let config = config(
                &format!("algorithm = \"fixed-window\"\nlimit = {limit}\nwindow = \"1s\"\nlease = \"auto\""),
                "ip",
            );
            let mut at = T0;
            let mut log = String::new();
            for _ in 0..1 + rng.below(800) {
                // Bursts and lulls: mostly a few milliseconds apart, sometimes a quarter second.
                at += if rng.below(20) == 0 { rng.below(NANOS_PER_SEC / 4) } else { rng.below(4_000_000) };
                log.push_str(&line(at, &format!("10.0.0.{}", rng.below(3))));
            }
            let r = run(&config, &[log], n, split);
            let case = format!("seed {seed}: limit {limit}, {n} instances, {split:?}: {r:?}");
            assert_eq!(r.over_admitted, 0, "{case}");
            assert!(r.admitted <= r.admitted_exact, "{case}");
            under += r.under_admitted;
        }
        println!("under-admitted over all runs: {under}");
    }

    /// A token bucket leased by four instances: a hot key's requests are decided from leases
    /// (a few store calls), and random arrivals never pass the bucket's bound nor beat one
    /// exact limiter (unit costs: the exact bucket admits as many as any schedule can).
    #[test]
    fn a_leased_token_bucket_saves_store_calls_and_never_over_admits() {
        let bucket = |capacity: u64, rate: u64| {
            config(
                &format!(
                    "algorithm = \"token-bucket\"\ncapacity = {capacity}\nrefill_per_second = {rate}\nlease = \"auto\""
                ),
                "const:everyone",
            )
        };
        // 1,000 a second over 3 s, against 2,000 tokens refilled at 1,000 a second: never
        // denied. Each instance sees 250 a second, so a lease is 25 units, and renewing one is
        // two store calls (the old hold released, a new one taken): about one in six.
        let r =
            run(&bucket(2_000, 1_000), &[steady(T0, 3_000, NANOS_PER_SEC / 1_000, "10.0.0.1")], 4, Split::RoundRobin);
        assert_eq!(r.leased_policies, ["hot"]);
        assert_eq!((r.admitted, r.over_admitted), (3_000, 0), "{r:?}");
        assert!(r.store_calls * 5 < r.decisions, "{} store calls for {} decisions", r.store_calls, r.decisions);
        let mut under = 0;
        for seed in 0..32 {
            let mut rng = sluice_sim::Rng::new(seed);
            let (capacity, rate) = (1 + rng.below(60), 1 + rng.below(200));
            let n = 1 + rng.below(4) as usize;
            let mut at = T0;
            let mut log = String::new();
            for _ in 0..1 + rng.below(800) {
                at += if rng.below(20) == 0 { rng.below(NANOS_PER_SEC / 4) } else { rng.below(4_000_000) };
                log.push_str(&line(at, "10.0.0.1"));
            }
            let r = run(&bucket(capacity, rate), &[log], n, Split::RoundRobin);
            let case = format!("seed {seed}: capacity {capacity}, {rate}/s, {n} instances: {r:?}");
            assert_eq!(r.over_admitted, 0, "{case}");
            assert!(r.admitted <= r.admitted_exact, "{case}");
            under += r.under_admitted;
        }
        println!("under-admitted over all runs: {under}");
    }
}
