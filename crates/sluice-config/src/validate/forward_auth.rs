//! `[forward_auth]`: the path trusted proxies ask, in its normal form and not taken.

use super::decision_api::DECISION_API_PATH;
use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::path::request_path;
use crate::raw::*;

/// `[forward_auth]`, which answers only `server`'s trusted proxies.
pub(super) fn forward_auth(
    src: &Source<'_>,
    raw: toml::Spanned<RawForwardAuth>,
    server: &Server,
) -> Result<ForwardAuth, ConfigError> {
    let span = raw.span();
    let f = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("forward_auth.{field}"), msg);
    let path = f.path.unwrap_or_else(|| "/v1/authz".into());
    // Compared with the request's path as sent: only its normal form can be asked for.
    match request_path(&path) {
        Ok(normal) if normal == path.as_str() => {}
        Ok(normal) => return Err(err("path", format!("write `{path}` in its normal form, `{normal}`"))),
        Err(_) => return Err(err("path", format!("`{path}` is not a path like `/v1/authz`"))),
    }
    if path == DECISION_API_PATH || path == "/" {
        return Err(err("path", format!("`{path}` is taken; use another path, like `/v1/authz`")));
    }
    if server.trusted_proxies.is_empty() {
        return Err(err(
            "path",
            "forward-auth answers only trusted proxies (anyone else could spend any client's quota by naming it): \
             list the proxies' addresses in server.trusted_proxies"
                .into(),
        ));
    }
    let deny_status = f.deny_status.unwrap_or(server.deny_status);
    check_deny_status(deny_status).map_err(|m| err("deny_status", m))?;
    Ok(ForwardAuth { path, deny_status })
}
