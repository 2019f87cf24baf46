//! `[decision_api]`: who may ask (allowed peers, a bearer token) and the largest cost asked.

use super::address::ip_net;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::raw::*;
use crate::secret::read_secret;

/// The decision API's path (`sluice_gateway::decision_api::PATH`), which it answers first.
pub(super) const DECISION_API_PATH: &str = "/v1/check";

/// `[decision_api]`; `enabled` is `server.decision_api`.
pub(super) fn decision_api(
    src: &Source<'_>,
    raw: Option<toml::Spanned<RawDecisionApi>>,
    enabled: Option<bool>,
) -> Result<DecisionApi, ConfigError> {
    let (span, d) = match raw {
        Some(d) => (d.span(), d.into_inner()),
        None => (0..0, RawDecisionApi::default()),
    };
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("decision_api.{field}"), msg);
    let allow = match d.allow {
        None => vec!["127.0.0.0/8".parse().expect("a CIDR"), "::1/128".parse().expect("a CIDR")],
        Some(list) => list.iter().map(|p| ip_net(p).map_err(|m| err("allow", m))).collect::<Result<_, _>>()?,
    };
    let token = read_secret(src, &span, "decision_api", "token", (d.token, d.token_file, d.token_env))?;
    if d.max_cost == Some(0) {
        return Err(err("max_cost", "must be at least 1".into()));
    }
    Ok(DecisionApi { enabled, allow, token, max_cost: d.max_cost })
}
