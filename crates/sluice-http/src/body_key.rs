//! Which JSON a request body gives to `json:` key parts, or why the body is refused.
//!
//! The body is read by the face that has it (the gateway reads a bounded prefix); the rule for
//! what may be keyed lives here, once.

use sluice_config::{KeySource, RouteLimit};

/// Why a body that a route keys on is refused (400): keying it would let an attacker choose
/// a bucket the upstream does not see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefusal {
    /// The body is complete but not JSON.
    #[error("This route needs a JSON request body.")]
    NotJson,
    /// The keyed field is an array or an object, which an upstream might still coerce.
    #[error("A field this route is limited by must be a string or a number.")]
    NotScalar,
    /// The body could not be read.
    #[error("The request body could not be read.")]
    Unreadable,
}

/// True when some limit of `limits` reads the body.
pub fn needs_body(limits: &[RouteLimit]) -> bool {
    limits.iter().any(|l| l.key.needs_body())
}

/// The JSON that `json:` key parts of `limits` read from a body whose first bytes are `bytes`
/// (`complete`: the whole body fit in them).
///
/// A body larger than the bound is forwarded intact and, like an empty body or a missing
/// field, has no key: such requests share one "absent" key, so together they get one account's
/// allowance, never one each. A complete body that cannot be keyed is refused.
///
/// ```
/// use sluice_http::body_key::{keyable_json, BodyRefusal};
/// let limits = sluice_config::parse("t.toml", r#"
/// [[policy]]
/// name = "per-account"
/// algorithm = "fixed-window"
/// limit = 3
/// window = "15m"
/// [[route]]
/// path = "/reset"
/// limits = [{ policy = "per-account", key = "json:/email" }]
/// "#).unwrap().routes[0].limits.clone();
/// assert!(keyable_json(&limits, br#"{"email":"a@example.com"}"#, true).unwrap().is_some());
/// assert_eq!(keyable_json(&limits, b"email=a", true), Err(BodyRefusal::NotJson));
/// assert_eq!(keyable_json(&limits, br#"{"email":["a","b"]}"#, true), Err(BodyRefusal::NotScalar));
/// assert_eq!(keyable_json(&limits, br#"{"email":"#, false), Ok(None)); // too large: absent
/// ```
pub fn keyable_json(
    limits: &[RouteLimit],
    bytes: &[u8],
    complete: bool,
) -> Result<Option<serde_json::Value>, BodyRefusal> {
    if !complete || bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let json = serde_json::from_slice::<serde_json::Value>(bytes).map_err(|_| BodyRefusal::NotJson)?;
    let pointers = limits.iter().flat_map(|l| l.key.parts.iter().flatten()).filter_map(|s| match s {
        KeySource::Json(p) => Some(p.as_str()),
        _ => None,
    });
    for p in pointers {
        if matches!(json.pointer(p), Some(serde_json::Value::Array(_) | serde_json::Value::Object(_))) {
            return Err(BodyRefusal::NotScalar);
        }
    }
    Ok(Some(json))
}
