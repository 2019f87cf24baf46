//! A claim's value as key bytes.

use serde_json::Value;

use crate::body_key::JsonBody;

/// The bytes a claim is keyed by: a string as it is (like a header value: user ids are
/// case-sensitive), a number by value (`1`, `1.0` and `1e0` are one key, as in
/// [`JsonBody::key_text`]), a boolean as `true`/`false`. `None` for an empty string, `null`,
/// an array or an object: such a claim is absent.
///
/// ```
/// use serde_json::json;
/// use sluice_http::jwt::claim_key;
/// assert_eq!(claim_key(&json!("User-42")).as_deref(), Some(&b"User-42"[..]));
/// assert_eq!(claim_key(&json!(42)), claim_key(&json!(42.0)));
/// assert_eq!(claim_key(&json!(42)).as_deref(), Some(&b"42"[..]));
/// assert_eq!(claim_key(&json!(["a"])), None);
/// assert_eq!(claim_key(&json!("")), None);
/// ```
pub fn claim_key(value: &Value) -> Option<Box<[u8]>> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.as_bytes().into()),
        Value::Number(n) => JsonBody::Number(n.clone()).key_text().map(|t| t.into_bytes().into()),
        Value::Bool(b) => JsonBody::Bool(*b).key_text().map(|t| t.into_bytes().into()),
        _ => None,
    }
}
