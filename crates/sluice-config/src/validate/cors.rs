//! `[server.cors]` and a route's `cors`: the origins whose browser code may read sluice's own
//! answers, and what preflights get.

use crate::error::{ConfigError, Source};
use crate::model::*;
use crate::parse_duration;
use crate::raw::*;

/// `[server.cors]`.
pub(super) fn cors(src: &Source<'_>, raw: toml::Spanned<RawCors>) -> Result<Cors, ConfigError> {
    let span = raw.span();
    let c = raw.into_inner();
    let err =
        |field: &str, msg: String| src.error(Some(src.field_line(&span, field)), format!("server.cors.{field}"), msg);
    let Some(list) = c.allow_origins else {
        return Err(err(
            "allow_origins",
            "is needed: the origins (`https://app.example`) whose pages may read sluice's answers, or `[\"*\"]`".into(),
        ));
    };
    let allow_origins = origins(list).map_err(|m| err("allow_origins", m))?;
    let preflight = match c.preflight.as_deref().unwrap_or("pass") {
        "pass" => Preflight::Pass,
        "answer" => Preflight::Answer,
        other => return Err(err("preflight", format!("`{other}` is neither `pass` (to the upstream) nor `answer`"))),
    };
    let max_age = parse_duration(c.max_age.as_deref().unwrap_or("10m")).map_err(|m| err("max_age", m))?;
    Ok(Cors { allow_origins, preflight, max_age })
}

/// An `allow_origins` list: `["*"]`, or origins written as browsers send them
/// (`scheme://host[:port]`, no path, no trailing slash).
pub(super) fn origins(list: Vec<String>) -> Result<Origins, String> {
    if list.is_empty() {
        return Err("is empty: list the origins, or `[\"*\"]`".into());
    }
    if list.iter().any(|o| o == "*") {
        return match list.len() {
            1 => Ok(Origins::Any),
            _ => Err("`*` already allows every origin: list it alone".into()),
        };
    }
    let mut out = Vec::with_capacity(list.len());
    for o in list {
        if o == "null" {
            return Err(
                "`null` is the origin of sandboxed frames and local files, which any page can be: not allowed".into()
            );
        }
        let rest = o.strip_prefix("https://").or_else(|| o.strip_prefix("http://"));
        let Some(rest) = rest else {
            return Err(format!("`{o}` is not an origin: write it as browsers send it, `https://app.example`"));
        };
        if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
            return Err(format!("`{o}` is not an origin: scheme, host and port only (no path, no trailing `/`)"));
        }
        out.push(o.to_ascii_lowercase());
    }
    Ok(Origins::List(out))
}
