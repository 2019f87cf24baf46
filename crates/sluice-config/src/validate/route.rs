//! `[[route]]`: its path and methods, and its limits (keys, policies or plans, costs).

use std::collections::HashMap;
use std::ops::Range;

use sluice_core::{CostError, check_cost};

use crate::cost_from::CostFrom;
use crate::error::{ConfigError, Source};
use crate::key_part::plan_source;
use crate::model::*;
use crate::path::{PathPattern, PathShape, normalize_path, request_path};
use crate::raw::*;

/// The `i`th `[[route]]`, at `span`: `policies` names the `configured` policies' indices.
pub(super) fn route(
    src: &Source<'_>,
    i: usize,
    span: &Range<usize>,
    r: RawRoute,
    policies: &HashMap<String, usize>,
    configured: &[PolicyConfig],
    (server, identity): (&Server, &Identity),
) -> Result<Route, ConfigError> {
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(span, field)), format!("route[{i}].{field}"), msg);
    if !r.path.starts_with('/') {
        return Err(err("path", format!("`{}` must start with `/`", r.path)));
    }
    if let Err(why) = request_path(&r.path) {
        return Err(err("path", format!("`{}`: {why} Routes name paths as clients send them.", r.path)));
    }
    let shape = match r.path.strip_suffix('*') {
        Some(prefix) if prefix.ends_with('/') => {
            let norm = normalize_path(prefix);
            PathShape::Prefix(if norm == "/" { norm.into_owned() } else { format!("{norm}/") })
        }
        Some(_) => return Err(err("path", format!("`{}`: a prefix must end in `/*`, like `/api/*`", r.path))),
        None if r.path.contains('*') => return Err(err("path", format!("`{}`: `*` only at the end", r.path))),
        None => PathShape::Path(normalize_path(&r.path).into_owned()),
    };
    let path = PathPattern { shape, exact: r.exact };
    let methods = r.methods.map(|ms| ms.iter().map(|m| m.to_ascii_uppercase()).collect::<Vec<_>>());
    if let Some(ms) = &methods
        && let Some(bad) = ms.iter().find(|m| m.is_empty() || !m.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        return Err(err("methods", format!("`{bad}` is not an HTTP method")));
    }
    let route_cost = r.cost.unwrap_or(1);
    // No policy yet: the route's own cost is only bounded below (each limit checks its policy's).
    check_cost(route_cost, u64::MAX).map_err(|_| err("cost", CostError::ZERO.into()))?;
    let mut limits = Vec::with_capacity(r.limits.len());
    for (j, l) in r.limits.into_iter().enumerate() {
        let at = format!("route[{i}].limits[{j}]");
        let lerr = |field: &str, msg: String| {
            let path = if field.is_empty() { at.clone() } else { format!("{at}.{field}") };
            src.error(Some(src.field_line(span, if field.is_empty() { "limits" } else { field })), path, msg)
        };
        let texts = match l.key {
            RawKey::One(s) => vec![s],
            RawKey::Parts(v) => v,
        };
        let key = KeySpec::parse(&texts).map_err(|m| lerr("", m))?;
        let needs_source = |s: &KeySource| -> Result<(), ConfigError> {
            match s.base() {
                KeySource::User if server.user_header.is_none() => {
                    Err(lerr("", format!("key part `{s}` needs `server.user_header`")))
                }
                KeySource::Tls(_) if server.tls.as_ref().is_none_or(|t| t.client_ca.is_none()) => {
                    Err(lerr("", format!("key part `{s}` needs `[server.tls] client_ca` (client certificates)")))
                }
                KeySource::Jwt(_) if identity.jwt.is_none() => {
                    Err(lerr("", format!("key part `{s}` needs `[identity.jwt]`")))
                }
                _ => Ok(()),
            }
        };
        key.parts.iter().flatten().try_for_each(needs_source)?;
        let cost = l.cost.unwrap_or(route_cost);
        check_cost(cost, u64::MAX).map_err(|e| lerr("", e.to_string()))?;
        let cost_from = l.cost_from.as_deref().map(CostFrom::parse).transpose().map_err(|m| lerr("cost_from", m))?;
        if cost_from == Some(CostFrom::ResponseExtension) {
            let msg = "`response-extension` is for the tower layer, whose inner service reports a cost in its \
                       response's extensions; an upstream has none: read a response header or its body instead";
            return Err(lerr("cost_from", msg.into()));
        }
        let choices = match (l.policy, l.policy_by) {
            (Some(_), Some(_)) => {
                return Err(lerr(
                    "policy_by",
                    "give `policy`, or `policy_by` with `policies` and `default_policy`, not both".into(),
                ));
            }
            (Some(name), None) => {
                for (field, there) in
                    [("policies", l.policies.is_some()), ("default_policy", l.default_policy.is_some())]
                {
                    if there {
                        return Err(lerr(field, "applies only with `policy_by` (and without `policy`)".into()));
                    }
                }
                vec![(name, None)]
            }
            (None, None) => {
                return Err(lerr("", "needs `policy`, or `policy_by` with `policies` and `default_policy`".into()));
            }
            (None, Some(by)) => {
                let by = plan_source(&by, server).map_err(|m| lerr("policy_by", m))?;
                needs_source(&by)?;
                let plans = l.policies.ok_or_else(|| {
                    lerr(
                        "policy_by",
                        "needs `policies`, a table of plan = policy, like `{ free = \"search-free\" }`".into(),
                    )
                })?;
                if plans.is_empty() {
                    return Err(lerr("policies", "must name at least one plan".into()));
                }
                if plans.keys().any(String::is_empty) {
                    return Err(lerr("policies", "a plan name must not be empty".into()));
                }
                let default = l.default_policy.ok_or_else(|| {
                    lerr(
                        "policy_by",
                        "needs `default_policy`: the policy of requests with no plan, or one `policies` does not name"
                            .into(),
                    )
                })?;
                let named: Vec<String> = plans.keys().cloned().collect();
                let mut choices: Vec<(String, Option<PlanChoice>)> = plans
                    .into_iter()
                    .map(|(plan, policy)| {
                        (policy, Some(PlanChoice { by: by.clone(), plan: Some(plan), named: named.clone() }))
                    })
                    .collect();
                choices.push((default, Some(PlanChoice { by, plan: None, named })));
                choices
            }
        };
        for (name, plan) in choices {
            let field = match &plan {
                None => String::new(),
                Some(PlanChoice { plan: Some(p), .. }) => format!("policies.{p}"),
                Some(PlanChoice { plan: None, .. }) => "default_policy".to_string(),
            };
            let policy = *policies.get(&name).ok_or_else(|| lerr(&field, format!("no policy named `{name}`")))?;
            if configured[policy].concurrency && cost_from.is_some() {
                return Err(lerr(
                    "cost_from",
                    format!(
                        "policy `{name}` counts requests in flight: their slots are given back when the response \
                         ends, there is no cost to read from it"
                    ),
                ));
            }
            configured[policy].policy.check_cost(cost).map_err(|e| {
                let limit = e.capacity;
                lerr(&field, format!("cost {cost} exceeds policy `{name}`'s limit {limit}: no request could pass"))
            })?;
            limits.push(RouteLimit { policy, key: key.clone(), cost, cost_from: cost_from.clone(), plan });
        }
    }
    let mut loosen = Loosen::default();
    for name in &r.loosen {
        match name.as_str() {
            "content-type" => loosen.content_type = true,
            "query" => loosen.query = true,
            other => {
                let known = Loosen::NAMES.join(", ");
                return Err(err("loosen", format!("`{other}` is not a refusal a route can waive ({known})")));
            }
        }
    }
    if (loosen.content_type || loosen.query) && !limits.iter().any(|l| l.key.needs_body()) {
        return Err(err(
            "loosen",
            "`content-type` and `query` waive refusals of body key parts (json:, form:), and no limit here has one"
                .into(),
        ));
    }
    let mut websocket = false;
    for u in &r.upgrades {
        match u.to_ascii_lowercase().as_str() {
            "websocket" => websocket = true,
            _ => {
                return Err(err(
                    "upgrades",
                    format!("`{u}` is not a protocol the gateway relays (`websocket`; HTTP/2 is `[server] h2c`)"),
                ));
            }
        }
    }
    let cors = r
        .cors
        .map(|c| super::cors::origins(c.allow_origins).map_err(|m| err("cors", format!("allow_origins: {m}"))))
        .transpose()?;
    let timeouts = match r.timeouts {
        None => TimeoutsOverride::NONE,
        Some(t) => super::upstream::timeouts(t).map_err(|(stage, m)| {
            src.error(Some(src.field_line(span, stage)), format!("route[{i}].timeouts.{stage}"), m)
        })?,
    };
    // `upstream` names a `[[upstreams]]` entry: resolved once they are all read (`mod.rs`).
    Ok(Route {
        name: r.name.unwrap_or_else(|| r.path.clone()),
        path,
        methods,
        limits,
        loosen,
        websocket,
        cors,
        upstream: None,
        timeouts,
    })
}
