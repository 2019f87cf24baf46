//! Raw structs to the validated model, one field at a time, each error located: a module per
//! table it validates, this one joining them and checking what spans tables.

mod access_log;
mod address;
mod cors;
mod decision_api;
mod decision_log;
mod forward_auth;
mod policy;
mod rls;
mod route;
mod server;
mod store;
mod upstream;
mod upstreams;

use std::collections::HashMap;

use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;
use address::addr;

/// The whole configuration: every table, then what one table requires of another.
pub(crate) fn validate(src: &Source<'_>, raw: RawConfig) -> Result<Config, ConfigError> {
    let (server, decision_api_switch) = server::server(src, raw.server)?;
    let identity = crate::identity::identity(src, raw.identity)?;
    let upstream = raw.upstream.map(|u| upstream::upstream(src, u)).transpose()?;
    let mut policies = Vec::with_capacity(raw.policy.len());
    let mut by_name = HashMap::new();
    let mut spans = Vec::with_capacity(raw.policy.len());
    // The units the file gives (`requests` included), before any is inferred.
    let raw_units: Vec<Option<String>> = raw.policy.iter().map(|p| p.get_ref().unit.clone()).collect();
    for (i, p) in raw.policy.into_iter().enumerate() {
        let span = p.span();
        spans.push(span.clone());
        let pc = policy::policy(src, i, &span, p.into_inner())?;
        if by_name.insert(pc.name.clone(), i).is_some() {
            let line = src.field_line(&span, "name");
            return Err(src.error(
                Some(line),
                format!("policy[{i}].name"),
                format!("duplicate policy name `{}`", pc.name),
            ));
        }
        policies.push(pc);
    }
    let route_spans: Vec<_> = raw.route.iter().map(|r| r.span()).collect();
    let upstreams = upstreams::upstreams(src, raw.upstreams)?;
    let named_upstreams: Vec<Option<String>> = raw.route.iter().map(|r| r.get_ref().upstream.clone()).collect();
    let mut routes = raw
        .route
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let span = r.span();
            route::route(src, i, &span, r.into_inner(), &by_name, &policies, (&server, &identity))
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (i, name) in named_upstreams.into_iter().enumerate() {
        let Some(name) = name else { continue };
        let Some(at) = upstreams.iter().position(|u| u.name == name) else {
            let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
            return Err(src.error(
                Some(src.field_line(&route_spans[i], "upstream")),
                format!("route[{i}].upstream"),
                format!(
                    "no `[[upstreams]]` is named `{name}` (known: {})",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ),
            ));
        };
        routes[i].upstream = Some(at);
    }
    for (i, p) in policies.iter_mut().enumerate() {
        if p.unit.is_none() && raw_units[i].is_none() {
            p.unit = inferred_unit(i, &routes);
        }
    }
    if upstream.is_none()
        && let Some(i) = routes.iter().position(|r| r.websocket && r.upstream.is_none())
    {
        return Err(src.error(
            Some(src.field_line(&route_spans[i], "upgrades")),
            format!("route[{i}].upgrades"),
            "a WebSocket is relayed to the upstream: add `[upstream]`, or remove `upgrades`".to_string(),
        ));
    }
    let store_span = raw.store.as_ref().map(|s| s.span());
    let store = store::store(src, raw.store)?;
    if matches!(store, StoreConfig::Redis { .. }) && server.key_secret.is_none() {
        let span = store_span.unwrap_or(0..0);
        return Err(src.error(
            Some(src.field_line(&span, "kind")),
            "server.key_secret",
            "a Redis store is shared by every instance that uses it: set server.key_secret (or key_secret_file, or \
             key_secret_env naming a variable) to the same long random secret on each, or they hash one client to \
             different keys and each instance grants the full limit",
        ));
    }
    if let (StoreConfig::Memory { .. }, Some(i)) = (&store, policies.iter().position(|p| p.lease)) {
        return Err(src.error(
            Some(src.field_line(&spans[i], "lease")),
            format!("policy[{i}].lease"),
            "quota leases move a hot key's budget from a shared store into each instance: with the memory store \
             every decision is in memory already; remove `lease`, or use `[store] kind = \"redis\"`"
                .to_string(),
        ));
    }
    let misnamed = policies.iter().enumerate().find(|(_, p)| !sluice_store::is_key_name(&p.name));
    if let (StoreConfig::Redis { .. }, Some((i, p))) = (&store, misnamed) {
        return Err(src.error(
            Some(src.field_line(&spans[i], "name")),
            format!("policy[{i}].name"),
            format!("with a Redis store a policy's name {}: `{}` is not", store::KEY_NAME, p.name),
        ));
    }
    if matches!(store, StoreConfig::Memory { snapshot: Some(_), .. }) && server.key_secret.is_none() {
        let span = store_span.unwrap_or(0..0);
        return Err(src.error(
            Some(src.field_line(&span, "snapshot")),
            "server.key_secret",
            "a snapshot is read by the next process, which must hash every client to the same key: set \
             server.key_secret (or key_secret_file, or key_secret_env naming a variable) to a long random secret \
             kept across restarts; without one each process draws its own and the snapshot fits no key",
        ));
    }
    let decision_api = decision_api::decision_api(src, raw.decision_api, decision_api_switch)?;
    let admin = raw
        .admin
        .map(|a| {
            let span = a.span();
            let listen = a.into_inner().listen.unwrap_or_else(|| "127.0.0.1:9090".into());
            addr(src, &span, "admin", "listen", &listen).map(|listen| Admin { listen })
        })
        .transpose()?;
    let decision_log = decision_log::decision_log(src, raw.decision_log)?;
    let rls = raw.rls.map(|r| rls::rls(src, r)).transpose()?;
    let forward_auth_span = raw.forward_auth.as_ref().map(|f| f.span());
    let forward_auth = raw.forward_auth.map(|f| forward_auth::forward_auth(src, f, &server)).transpose()?;
    if let Some(span) = forward_auth_span {
        let held = routes.iter().enumerate().find_map(|(i, r)| {
            let l = r.limits.iter().find(|l| policies[l.policy].concurrency)?;
            Some((i, &policies[l.policy].name))
        });
        if let Some((route, policy)) = held {
            return Err(src.error(
                Some(src.field_line(&span, "path")),
                "forward_auth",
                format!(
                    "route[{route}] limits requests in flight (policy `{policy}`), which forward-auth cannot do: the \
                     proxy never says when the request it asked about ends, so its slot would be held for the whole \
                     lease. Limit concurrency with sluice as the gateway or the tower layer"
                ),
            ));
        }
    }
    let access_log = raw.access_log.map(|a| access_log::access_log(src, a)).transpose()?;
    Ok(Config {
        access_log,
        server,
        upstream,
        upstreams,
        policies,
        routes,
        store,
        admin,
        decision_log,
        decision_api,
        rls,
        identity,
        forward_auth,
    })
}

/// The unit of policy `i` that the file does not name: `content-bytes` when every limit on it
/// is charged the bytes of its response, else requests (`None`).
fn inferred_unit(i: usize, routes: &[crate::model::Route]) -> Option<String> {
    let mut limits = routes.iter().flat_map(|r| &r.limits).filter(|l| l.policy == i).peekable();
    limits.peek()?;
    limits.all(|l| l.cost_from == Some(crate::CostFrom::ResponseBytes)).then(|| "content-bytes".to_string())
}
