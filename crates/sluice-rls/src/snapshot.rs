//! What one load of the descriptor directory decides with: the descriptors, their policies,
//! the store and the pipeline's [`Limiter`] over it, and the route each domain's decisions are
//! counted under. Swapped whole on reload.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use http::StatusCode;
use sluice_config::{Config, HeaderStyle, PolicyConfig};
use sluice_core::{Policy, format_duration};
use sluice_gateway::observe::{FaceObserver, FaceRoute, Observer};
use sluice_gateway::stores::StoreBuilder;
use sluice_http::enforce::Enforcer;
use sluice_http::identity::ClientIdentity;
use sluice_http::keys::KeyBuilder;
use sluice_http::pipeline::Limiter;
use sluice_store::{KeyHash, KeyHasher};

use crate::descriptors::Descriptors;
use crate::rate_limit::Rule;

/// The most policies that `limit` overrides of requests may add to a load: overrides are
/// written in Envoy's route configuration, so a handful is usual; the bound keeps a client that
/// sends arbitrary overrides from growing the store's policy list without end.
pub const MAX_OVERRIDE_POLICIES: usize = 256;

/// What the `route` label (and decision log field) of a configured domain's decisions starts
/// with: `rls:` and the domain, as its file names it.
pub const ROUTE_PREFIX: &str = "rls:";

/// The `route` of decisions in a domain no file configures (only `limit` overrides reach the
/// store there): one fixed name, so a request's domain never becomes a label.
pub const UNKNOWN_DOMAIN_ROUTE: &str = "rls:(unknown)";

/// One load: descriptors, policies, store, limiter.
pub(crate) struct Snapshot {
    /// The loaded files.
    pub descriptors: Descriptors,
    /// For each limit of `descriptors`, its policy's index (none for unlimited and zero limits).
    pub limit_policy: Vec<Option<usize>>,
    /// The policies in store order: one per distinct (algorithm and parameters, shadow).
    pub policies: Vec<PolicyConfig>,
    /// Policy indices by (policy, shadow).
    by_policy: HashMap<(Policy, bool), usize>,
    /// Policies added for `limit` overrides, kept across reloads.
    pub overrides: Vec<Policy>,
    /// The pipeline: enforcer over the store, key hasher, header styles.
    pub limiter: Limiter,
    /// Counts and logs this load's decisions under the gateway's metric names.
    pub observed: FaceObserver,
    /// Each configured domain's route, `rls:<domain>`, counting its own policies. Checks of
    /// `limit` overrides count for the request only: their parameters, so their policy names,
    /// come from requests, and a label never does.
    routes: HashMap<String, FaceRoute>,
    /// [`UNKNOWN_DOMAIN_ROUTE`], resolved when first decided on.
    unknown: OnceLock<FaceRoute>,
}

/// What every load is built from.
pub(crate) struct Env {
    /// The configuration the service runs under (`[store]`, `[server]` key secret and headers).
    pub base: Config,
    /// Builds the store of each load, keeping the state of unchanged policies.
    pub builder: Box<dyn StoreBuilder>,
    /// The keyed hasher (the `[server]` key secret, or a random one for one process).
    pub hasher: KeyHasher,
    /// Header styles of `response_headers_to_add`.
    pub styles: Vec<HeaderStyle>,
    /// The metric families and decision log sources counted into (the gateway's, beside it).
    pub observer: Arc<Observer>,
}

impl Snapshot {
    /// Builds a load of `descriptors`, with the override policies `overrides`; `previous` is the
    /// load in use, whose store keeps its state for unchanged policies.
    pub fn build(
        env: &Env,
        descriptors: Descriptors,
        overrides: Vec<Policy>,
        previous: Option<&Snapshot>,
    ) -> Result<Snapshot, String> {
        let mut policies: Vec<PolicyConfig> = Vec::new();
        let mut by_policy = HashMap::new();
        let mut intern = |policy: Policy, shadow: bool| {
            *by_policy.entry((policy, shadow)).or_insert_with(|| {
                policies.push(PolicyConfig {
                    name: policy_name(&policy, shadow),
                    policy,
                    shadow,
                    soft: false,
                    unit: None,
                    lease: false,
                    concurrency: false,
                });
                policies.len() - 1
            })
        };
        let limit_policy: Vec<Option<usize>> = descriptors
            .limits
            .iter()
            .map(|l| match l.rate.rule {
                Rule::Policy(p) => Some(intern(p, l.shadow)),
                Rule::Unlimited | Rule::Zero => None,
            })
            .collect();
        for p in &overrides {
            intern(*p, false);
        }
        let mut config = env.base.clone();
        config.policies = policies.clone();
        let store = env
            .builder
            .build(&config, previous.map(|s| s.limiter.enforcer().store()))
            .map_err(|e| format!("cannot build the store: {e}"))?;
        let observed = FaceObserver::new(&env.observer, store.as_ref(), &env.base.decision_log);
        let limiter = Limiter::new(
            Enforcer::of_config(store, &config),
            KeyBuilder::new(env.hasher.clone(), None),
            ClientIdentity::new(Vec::new(), sluice_config::DEFAULT_IPV6_PREFIX),
            env.styles.clone(),
            StatusCode::TOO_MANY_REQUESTS,
        );
        let routes = domain_policies(&descriptors, &limit_policy)
            .into_iter()
            .map(|(domain, among)| {
                let route = observed.route_among(&format!("{ROUTE_PREFIX}{domain}"), &among);
                (domain, route)
            })
            .collect();
        Ok(Snapshot {
            descriptors,
            limit_policy,
            policies,
            by_policy,
            overrides,
            limiter,
            observed,
            routes,
            unknown: OnceLock::new(),
        })
    }

    /// The route `domain`'s decisions are counted under: its own, or [`UNKNOWN_DOMAIN_ROUTE`]
    /// for a domain no file configures.
    pub fn route(&self, domain: &str) -> &FaceRoute {
        self.routes.get(domain).unwrap_or_else(|| {
            // Only overrides reach the store there: the route counts requests, no policy.
            self.unknown.get_or_init(|| self.observed.route_among(UNKNOWN_DOMAIN_ROUTE, &[]))
        })
    }

    /// The index of an unshadowed `policy`, if this load has it.
    pub fn policy_index(&self, policy: &Policy) -> Option<usize> {
        self.by_policy.get(&(*policy, false)).copied()
    }

    /// The key of a request descriptor under policy `policy`: the keyed hash of the policy's
    /// name, the domain and each entry's key and (counted) value, apart from every other kind of
    /// sluice key (a gateway key or a decision API key never lands in a descriptor's bucket).
    pub fn key(&self, policy: usize, domain: &str, entries: &[(&str, &str)]) -> KeyHash {
        self.limiter.keys().descriptor(&self.policies[policy].name, domain, entries)
    }
}

/// Each domain with the policies its limits use, sorted: those its decisions are counted
/// under.
fn domain_policies(descriptors: &Descriptors, limit_policy: &[Option<usize>]) -> HashMap<String, Vec<usize>> {
    let mut out: HashMap<String, Vec<usize>> = descriptors.domains.keys().map(|d| (d.clone(), Vec::new())).collect();
    for (limit, policy) in descriptors.limits.iter().zip(limit_policy) {
        if let (Some(p), Some(among)) = (policy, out.get_mut(&limit.domain)) {
            among.push(*p);
        }
    }
    for among in out.values_mut() {
        among.sort_unstable();
        among.dedup();
    }
    out
}

/// A policy's name, in headers (`ietf`), logs and Redis keys (so only letters, digits and
/// `-_.`): algorithm, size and period.
///
/// ```text
/// fixed-window-20-per-1m   token-bucket-3-per-18s   fixed-window-10-per-1s-shadow
/// ```
fn policy_name(p: &Policy, shadow: bool) -> String {
    let mut name = format!("{}-{}-per-{}", p.name(), p.limit(), format_duration(p.window()));
    if shadow {
        name.push_str("-shadow");
    }
    name
}
