//! Where admitted requests go: `[upstream]` (the default) and the `[[upstreams]]` that routes
//! name, each a group of targets. A request's target is picked by the group's balance among the
//! targets not ejected ([`health`]); a request that could not be sent to its target at all (no
//! connection) is sent once more to another when its method is safe and it has no body; when
//! every target is ejected the answer is 503 `no_upstream`, counted.

pub mod health;
mod view;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response};
use sluice_config::{Balance, Config, Ejection, Route, TimeoutsOverride};
use sluice_http::identity::Client;

use crate::body::ReplayBody;
use crate::error::GatewayError;
use crate::observe::{LatencyHistogram, TargetLabels, UpstreamLabels, UpstreamMetrics, UpstreamTargetLabels};
use crate::proxy::{FailureKind, Forwarding, TlsErrors, Upstream};
use crate::respond::{self, Body};
use health::{HealthBook, TargetHealth, now_nanos};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
pub use view::{TargetView, UpstreamView};

/// The name `[upstream]` is counted under.
pub const DEFAULT: &str = "default";

/// Every upstream of a configuration.
#[derive(Debug)]
pub struct Upstreams {
    /// `[upstream]`.
    default: Option<Group>,
    /// `[[upstreams]]`, in file order (routes hold their index).
    named: Vec<Group>,
}

impl Upstreams {
    /// The upstreams of `config`, with the health `book` keeps for targets that did not change.
    pub fn of_config(
        config: &Config,
        book: &HealthBook,
        tls_errors: &TlsErrors,
        metrics: &UpstreamMetrics,
    ) -> Result<Self, GatewayError> {
        let client =
            |u: &sluice_config::Upstream| Upstream::of_config(u).map(|up| up.counting_tls_errors(tls_errors.clone()));
        let default = match &config.upstream {
            Some(u) => Some(Group::new(
                DEFAULT,
                vec![(client(u)?, u.url.as_str())],
                Pick::RoundRobin,
                Ejection::NEVER,
                book,
                metrics,
            )),
            None => None,
        };
        let mut named = Vec::with_capacity(config.upstreams.len());
        for g in &config.upstreams {
            let targets =
                g.targets.iter().map(|t| Ok((client(t)?, t.url.as_str()))).collect::<Result<Vec<_>, GatewayError>>()?;
            let pick = match &g.balance {
                Balance::RoundRobin => Pick::RoundRobin,
                Balance::LeastRequests => Pick::LeastRequests,
                Balance::Hash(spec) => Pick::Hash(spec.clone()),
            };
            let mut group = Group::new(&g.name, targets, pick, g.eject, book, metrics);
            group.check = g.health_check.clone();
            named.push(group);
        }
        Ok(Self { default, named })
    }

    /// The group a request of `route` goes to (`None`: a request no route matched), if any.
    pub fn for_route(&self, route: Option<&Route>) -> Option<&Group> {
        match route.and_then(|r| r.upstream) {
            Some(i) => self.named.get(i),
            None => self.default.as_ref(),
        }
    }

    /// Whether requests go anywhere (else the gateway answers them itself).
    pub fn any(&self) -> bool {
        self.default.is_some() || !self.named.is_empty()
    }

    /// Asks every target whose health check is due (in tasks of their own, on this runtime):
    /// to be called often (every 100 ms) by one task of the server.
    pub fn check_due(&self) {
        let now = now_nanos();
        for group in &self.named {
            let Some(check) = &group.check else { continue };
            for target in &group.targets {
                if !target.health.check_due(now, check.interval) {
                    continue;
                }
                let (upstream, health, check) = (target.upstream.clone(), target.health.clone(), check.clone());
                let (name, target, counts) = (group.name.clone(), target.authority.clone(), target.counts.clone());
                tokio::spawn(async move {
                    let healthy = upstream.probe(&check.path, Duration::from_nanos(check.timeout)).await;
                    counts.checks[usize::from(!healthy)].inc();
                    match health.checked(healthy, check.healthy_after, check.unhealthy_after) {
                        Some(false) => {
                            tracing::warn!(target: "sluice::upstream", upstream = %name, target = %target, "health checks failing: out of rotation");
                        }
                        Some(true) => {
                            tracing::info!(target: "sluice::upstream", upstream = %name, target = %target, "health checks passing: back in rotation");
                        }
                        None => {}
                    }
                });
            }
        }
    }

    /// What the status page shows of each upstream, `[upstream]` first.
    pub fn views(&self) -> Vec<UpstreamView> {
        let now = now_nanos();
        self.default.iter().chain(&self.named).map(|g| g.view(now)).collect()
    }

    /// Every (upstream name, target URL) in use, for the health book to keep.
    pub fn in_use(&self) -> impl Iterator<Item = (&str, &str)> {
        self.default.iter().chain(&self.named).flat_map(|g| g.targets.iter().map(|t| (&*g.name, t.url.as_str())))
    }
}

/// How a group picks a target.
#[derive(Debug)]
enum Pick {
    RoundRobin,
    LeastRequests,
    Hash(sluice_config::KeySpec),
}

/// One target of a group.
#[derive(Debug)]
struct Target {
    /// The client to it.
    upstream: Upstream,
    /// Its URL as configured (the health book's key).
    url: String,
    /// `host:port`, for metrics and the access log.
    authority: String,
    /// Whether it is ejected, and its requests waiting.
    health: Arc<TargetHealth>,
    /// Its counters, resolved once (a proxied request allocates no label).
    counts: TargetCounts,
}

/// One target's counters in the upstream families.
#[derive(Debug, Clone)]
struct TargetCounts {
    /// Responses: 2xx, 3xx, 4xx, 5xx.
    responses: [Counter; 4],
    /// Failures: connect, timeout, broken.
    failures: [Counter; 3],
    /// Ejections.
    ejections: Counter,
    /// Health checks: healthy, unhealthy.
    checks: [Counter; 2],
    /// Response times (to the response head).
    latency: LatencyHistogram,
}

impl TargetCounts {
    fn resolve(metrics: &UpstreamMetrics, upstream: &str, target: &str) -> Self {
        let at = |family: &Family<TargetLabels, Counter>, outcome: &'static str| {
            family
                .get_or_create(&TargetLabels { upstream: upstream.to_string(), target: target.to_string(), outcome })
                .clone()
        };
        Self {
            responses: ["2xx", "3xx", "4xx", "5xx"].map(|o| at(&metrics.responses, o)),
            failures: ["connect", "timeout", "broken"].map(|o| at(&metrics.failures, o)),
            ejections: at(&metrics.ejections, ""),
            checks: ["healthy", "unhealthy"].map(|o| at(&metrics.health_checks, o)),
            latency: metrics
                .latency
                .get_or_create(&UpstreamTargetLabels { upstream: upstream.to_string(), target: target.to_string() })
                .clone(),
        }
    }
}

/// An upstream of one or more targets.
#[derive(Debug)]
pub struct Group {
    /// Its name (`default` for `[upstream]`).
    name: Arc<str>,
    /// Its targets.
    targets: Vec<Target>,
    /// How a target is picked.
    pick: Pick,
    /// When a failing target is ejected.
    eject: Ejection,
    /// Round-robin's next start.
    next: AtomicUsize,
    /// The families it counts into.
    metrics: UpstreamMetrics,
    /// Its active health checks, if any.
    check: Option<sluice_config::HealthCheck>,
}

impl Group {
    fn new(
        name: &str,
        targets: Vec<(Upstream, &str)>,
        pick: Pick,
        eject: Ejection,
        book: &HealthBook,
        metrics: &UpstreamMetrics,
    ) -> Self {
        let targets = targets
            .into_iter()
            .map(|(upstream, url)| Target {
                authority: upstream.authority().to_string(),
                health: book.of(name, url),
                counts: TargetCounts::resolve(metrics, name, upstream.authority().as_str()),
                url: url.to_string(),
                upstream,
            })
            .collect();
        Self {
            name: name.into(),
            targets,
            pick,
            eject,
            next: AtomicUsize::new(0),
            metrics: metrics.clone(),
            check: None,
        }
    }

    /// The key spec requests are hashed on, when the group balances by hash.
    pub fn hash_key(&self) -> Option<&sluice_config::KeySpec> {
        match &self.pick {
            Pick::Hash(spec) => Some(spec),
            _ => None,
        }
    }

    /// The target a request goes to (`hash`: its key's hash, for `balance = "hash"`), other than
    /// `except`; `None` when every one is ejected.
    fn pick(&self, hash: u64, except: Option<usize>) -> Option<usize> {
        let n = self.targets.len();
        // One target that is never taken out (`[upstream]`): no clock, no counter.
        if n == 1 && self.eject.after == 0 && self.check.is_none() {
            return (except != Some(0)).then_some(0);
        }
        let now = now_nanos();
        let up = |i: &usize| Some(*i) != except && self.targets[*i].health.available(now);
        match &self.pick {
            Pick::RoundRobin => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n).map(|k| (start + k) % n).find(up)
            }
            Pick::LeastRequests => {
                let start = self.next.fetch_add(1, Ordering::Relaxed);
                (0..n)
                    .map(|k| (start + k) % n)
                    .filter(up)
                    .min_by_key(|&i| self.targets[i].health.waiting.load(Ordering::Relaxed))
            }
            // Rendezvous hashing: the target whose score for this key is highest.
            Pick::Hash(_) => (0..n).filter(up).max_by_key(|&i| score(hash, i)),
        }
    }

    /// The client of the target a WebSocket tunnel opens to, and its name.
    pub fn tunnel_target(&self, hash: u64) -> Option<&Upstream> {
        self.pick(hash, None).map(|i| &self.targets[i].upstream)
    }

    /// Forwards `req` to a target, within its route's `timeouts` where they bound a stage: the
    /// response (502/504 when the target failed, 503 when none is up) and, when `timed`, the
    /// target that answered with how long its response head took. One async function (a loop
    /// of at most two attempts) rather than one per step: each layer of future would move the
    /// request's whole state once more.
    pub async fn forward(
        &self,
        req: Request<ReplayBody>,
        client: &Client,
        forwarding: &Forwarding,
        hash: u64,
        timeouts: &TimeoutsOverride,
        timed: bool,
    ) -> (Response<Body>, Option<(String, Duration)>) {
        let Some(mut at) = self.pick(hash, None) else { return (self.none_up(), None) };
        // Only a safe request without a body is sent twice: nothing of it can have acted, and
        // there is nothing to replay. Copied only when there is another target to send it to.
        let mut again = (self.targets.len() > 1
            && req.method().is_safe()
            && http_body::Body::is_end_stream(req.body()))
        .then(|| {
            let mut copy = Request::new(ReplayBody::empty());
            *copy.method_mut() = req.method().clone();
            *copy.uri_mut() = req.uri().clone();
            *copy.version_mut() = req.version();
            *copy.headers_mut() = req.headers().clone();
            copy
        });
        let least = matches!(self.pick, Pick::LeastRequests);
        let mut req = req;
        loop {
            let target = &self.targets[at];
            let asked = std::time::Instant::now();
            if least {
                target.health.waiting.fetch_add(1, Ordering::Relaxed);
            }
            let sent = target.upstream.send(req, client, forwarding, timeouts).await;
            if least {
                target.health.waiting.fetch_sub(1, Ordering::Relaxed);
            }
            let took = asked.elapsed();
            if sent.is_ok() {
                target.counts.latency.observe_nanos(took.as_nanos() as u64);
            }
            self.account(target, &sent);
            let answered = timed.then(|| (target.authority.clone(), took));
            match sent {
                Ok(res) => return (res, answered),
                Err(failed) => {
                    let next = match (failed.kind, again.take()) {
                        (FailureKind::NotSent, Some(copy)) => self.pick(hash, Some(at)).map(|n| (n, copy)),
                        _ => None,
                    };
                    let Some((next, copy)) = next else { return (failed.answer, answered) };
                    self.metrics.retries.get_or_create(&UpstreamLabels { upstream: self.name.to_string() }).inc();
                    (at, req) = (next, copy);
                }
            }
        }
    }

    /// Counts what `target` answered (or how it failed) and updates its health.
    fn account(&self, target: &Target, sent: &Result<Response<Body>, crate::proxy::Failure>) {
        let failed = match sent {
            Ok(res) => {
                let class = match res.status().as_u16() {
                    100..=299 => 0,
                    300..=399 => 1,
                    400..=499 => 2,
                    _ => 3,
                };
                target.counts.responses[class].inc();
                self.eject.on_5xx && res.status().is_server_error()
            }
            Err(f) if f.kind == FailureKind::Client => false,
            Err(f) => {
                let kind = match f.kind {
                    FailureKind::NotSent => 0,
                    FailureKind::Timeout => 1,
                    _ => 2,
                };
                target.counts.failures[kind].inc();
                true
            }
        };
        if !failed {
            if self.eject.after != 0 || self.check.is_some() {
                target.health.succeeded();
            }
        } else if target.health.failed(now_nanos(), &self.eject) {
            target.counts.ejections.inc();
            tracing::warn!(target: "sluice::upstream", upstream = %self.name, target = %target.authority, "target ejected");
        }
    }

    /// The answer when every target is ejected: 503, counted.
    pub fn none_up(&self) -> Response<Body> {
        self.metrics.unavailable.get_or_create(&UpstreamLabels { upstream: self.name.to_string() }).inc();
        let mut res = respond::error(
            503,
            "no_upstream",
            "Every target of this service is failing and out of rotation for now; retry shortly.",
        );
        res.headers_mut().insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
        res
    }
}

/// Rendezvous hashing's score of target `i` for a key hashed to `hash`.
fn score(hash: u64, i: usize) -> u64 {
    // splitmix64 of the key and the target's position: a fixed, well-mixed function.
    let mut z = hash ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash a request is balanced by: its `hash_key` under the key secret (0 for other balances).
pub fn request_hash(
    group: &Group,
    keys: &sluice_http::keys::KeyBuilder,
    facts: &sluice_http::keys::RequestFacts<'_>,
) -> u64 {
    let Some(spec) = group.hash_key() else { return 0 };
    keys.key(&group.name, spec, facts).map_or(0, |(k, _)| k.low64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(pick: Pick, n: usize, book: &HealthBook) -> Group {
        let targets: Vec<(Upstream, String)> = (0..n)
            .map(|i| {
                let url = format!("http://127.0.0.1:{}", 9000 + i);
                (Upstream::new(&url, Duration::from_secs(1)).unwrap(), url)
            })
            .collect();
        let eject = Ejection { after: 1, base: 60_000_000_000, on_5xx: false };
        let targets = targets.iter().map(|(u, url)| (u.clone(), url.as_str())).collect();
        Group::new("g", targets, pick, eject, book, &UpstreamMetrics::default())
    }

    #[test]
    fn round_robin_takes_each_in_turn_and_skips_the_ejected() {
        let book = HealthBook::default();
        let g = group(Pick::RoundRobin, 3, &book);
        let picks: Vec<usize> = (0..6).map(|_| g.pick(0, None).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        g.targets[1].health.failed(now_nanos(), &g.eject);
        let picks: Vec<usize> = (0..4).map(|_| g.pick(0, None).unwrap()).collect();
        assert!(!picks.contains(&1), "{picks:?}");
        assert_eq!(g.pick(0, Some(0)).map(|i| i != 0), Some(true), "`except` is never picked");
        for t in &g.targets {
            t.health.failed(now_nanos(), &g.eject);
        }
        assert_eq!(g.pick(0, None), None, "every target ejected");
    }

    #[test]
    fn least_requests_takes_the_target_with_fewest_waiting() {
        let book = HealthBook::default();
        let g = group(Pick::LeastRequests, 3, &book);
        g.targets[0].health.waiting.store(5, Ordering::Relaxed);
        g.targets[1].health.waiting.store(2, Ordering::Relaxed);
        g.targets[2].health.waiting.store(7, Ordering::Relaxed);
        assert_eq!(g.pick(0, None), Some(1));
        g.targets[1].health.waiting.store(9, Ordering::Relaxed);
        assert_eq!(g.pick(0, None), Some(0));
    }

    #[test]
    fn hash_keeps_keys_and_moves_only_those_of_a_target_that_goes() {
        let book = HealthBook::default();
        let g = group(Pick::Hash(sluice_config::KeySpec { parts: vec![] }), 4, &book);
        let keys: Vec<u64> = (0..400u64).map(|k| k.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let before: Vec<usize> = keys.iter().map(|&k| g.pick(k, None).unwrap()).collect();
        let mut per = [0; 4];
        before.iter().for_each(|&t| per[t] += 1);
        assert!(per.iter().all(|&n| n > 60), "spread: {per:?}");
        g.targets[2].health.failed(now_nanos(), &g.eject);
        for (&k, &was) in keys.iter().zip(&before) {
            let now = g.pick(k, None).unwrap();
            if was == 2 {
                assert_ne!(now, 2);
            } else {
                assert_eq!(now, was, "a key of a target that stayed moved");
            }
        }
    }

    #[test]
    fn health_is_kept_across_groups_for_the_same_target() {
        let book = HealthBook::default();
        let g = group(Pick::RoundRobin, 2, &book);
        g.targets[0].health.failed(now_nanos(), &g.eject);
        // A reload builds the group again: the target is still ejected.
        let again = group(Pick::RoundRobin, 2, &book);
        assert!(!again.targets[0].health.available(now_nanos()));
        assert!(again.targets[1].health.available(now_nanos()));
    }
}
