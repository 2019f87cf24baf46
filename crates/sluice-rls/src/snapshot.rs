//! What one load of the descriptor directory decides with: the descriptors, their policies,
//! the store and the pipeline's [`Limiter`] over it. Swapped whole on reload.

use http::StatusCode;
use sluice_config::{Config, HeaderStyle, PolicyConfig};
use sluice_core::{Policy, format_duration};
use sluice_gateway::stores::StoreBuilder;
use sluice_http::enforce::Enforcer;
use sluice_http::identity::ClientIdentity;
use sluice_http::keys::KeyBuilder;
use sluice_http::pipeline::Limiter;
use sluice_store::{KeyHash, KeyHasher};
use std::collections::HashMap;

use crate::descriptors::Descriptors;
use crate::rate_limit::Rule;

/// The most policies that `limit` overrides of requests may add to a load: overrides are
/// written in Envoy's route configuration, so a handful is usual; the bound keeps a client that
/// sends arbitrary overrides from growing the store's policy list without end.
pub const MAX_OVERRIDE_POLICIES: usize = 256;

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
                policies.push(PolicyConfig { name: policy_name(&policy, shadow), policy, shadow });
                policies.len() - 1
            })
        };
        let limit_policy = descriptors
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
        let limiter = Limiter::new(
            Enforcer::of_config(store, &config),
            KeyBuilder::new(env.hasher.clone(), None),
            ClientIdentity::new(Vec::new(), 56),
            env.styles.clone(),
            StatusCode::TOO_MANY_REQUESTS,
        );
        Ok(Snapshot { descriptors, limit_policy, policies, by_policy, overrides, limiter })
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
