//! Which JSON a request body gives to `json:` key parts, or why the body is refused.
//!
//! The body is read by the face that has it (the gateway reads a bounded prefix); the rule for
//! what may be keyed lives here, once. The rule is about ambiguity: a body that parsers read
//! differently — duplicate members (first-wins upstreams see one, last-wins another), member
//! names that case-insensitive binders (Go's `encoding/json`, ASP.NET) fold into the keyed one —
//! would let a client be limited as one account while the upstream acts for another.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use sluice_config::{KeySource, RouteLimit};

/// Why a body that a route keys on is refused (400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BodyRefusal {
    /// The body is complete but not JSON.
    #[error("This route needs a JSON request body.")]
    NotJson,
    /// The keyed field is an array or an object, which an upstream might still coerce.
    #[error("A field this route is limited by must be a string or a number.")]
    NotScalar,
    /// An object on the way to a keyed field has the member twice, or a member whose name
    /// differs from it only by case.
    #[error("A field this route is limited by is ambiguous: it appears twice, or in two spellings.")]
    Ambiguous,
    /// The body could not be read.
    #[error("The request body could not be read.")]
    Unreadable,
}

/// A JSON body as parsed for keys: every member of every object kept, in order, duplicates too.
#[derive(Debug, Clone, PartialEq)]
pub enum JsonBody {
    /// `null`
    Null,
    /// `true` or `false`
    Bool(bool),
    /// A number, as serde_json read it.
    Number(serde_json::Number),
    /// A string.
    String(String),
    /// An array.
    Array(Vec<JsonBody>),
    /// An object: its members in order, a repeated name repeated.
    Object(Vec<(String, JsonBody)>),
}

impl JsonBody {
    /// The value at an RFC 6901 JSON pointer (`/account/email`, `~1` for `/`, `~0` for `~`),
    /// refusing a path that is ambiguous (see [`BodyRefusal::Ambiguous`]).
    ///
    /// ```
    /// use sluice_http::body_key::{BodyRefusal, JsonBody};
    /// let body: JsonBody = serde_json::from_str(r#"{"user":{"email":"a@x"}}"#).unwrap();
    /// assert_eq!(body.pointer("/user/email"), Ok(Some(&JsonBody::String("a@x".into()))));
    /// assert_eq!(body.pointer("/user/phone"), Ok(None));
    /// let twice: JsonBody = serde_json::from_str(r#"{"email":"victim@x","email":"me@x"}"#).unwrap();
    /// assert_eq!(twice.pointer("/email"), Err(BodyRefusal::Ambiguous));
    /// let folded: JsonBody = serde_json::from_str(r#"{"email":"me@x","Email":"victim@x"}"#).unwrap();
    /// assert_eq!(folded.pointer("/email"), Err(BodyRefusal::Ambiguous));
    /// ```
    pub fn pointer(&self, pointer: &str) -> Result<Option<&JsonBody>, BodyRefusal> {
        let Some(path) = pointer.strip_prefix('/') else {
            return Ok(if pointer.is_empty() { Some(self) } else { None });
        };
        let mut at = self;
        for raw in path.split('/') {
            let token = raw.replace("~1", "/").replace("~0", "~");
            at = match at {
                JsonBody::Object(members) => {
                    let mut found = None;
                    for (name, value) in members {
                        if *name == token {
                            if found.is_some() {
                                return Err(BodyRefusal::Ambiguous);
                            }
                            found = Some(value);
                        } else if name.eq_ignore_ascii_case(&token) {
                            return Err(BodyRefusal::Ambiguous);
                        }
                    }
                    match found {
                        Some(v) => v,
                        None => return Ok(None),
                    }
                }
                JsonBody::Array(items) => {
                    // RFC 6901: decimal digits, no leading zero (`0` itself allowed).
                    if token.is_empty() || (token.len() > 1 && token.starts_with('0')) {
                        return Ok(None);
                    }
                    match token.parse::<usize>().ok().and_then(|i| items.get(i)) {
                        Some(v) => v,
                        None => return Ok(None),
                    }
                }
                _ => return Ok(None),
            };
        }
        Ok(Some(at))
    }

    /// The key material of a scalar: a string trimmed and lower-cased, a number by its value
    /// (`1`, `1.0` and `1e0` are one key), a boolean as `true`/`false`; `None` for null, an
    /// empty string, an array or an object.
    ///
    /// ```
    /// use sluice_http::body_key::JsonBody;
    /// let one = |t: &str| serde_json::from_str::<JsonBody>(t).unwrap().key_text();
    /// assert_eq!(one("1"), one("1.0"));
    /// assert_eq!(one("1e0").as_deref(), Some("1"));
    /// assert_eq!(one("\" Victim@Example.COM \"").as_deref(), Some("victim@example.com"));
    /// assert_eq!(one("[1]"), None);
    /// ```
    pub fn key_text(&self) -> Option<String> {
        let text = match self {
            JsonBody::String(s) => s.trim().to_lowercase(),
            JsonBody::Number(n) => number_key(n),
            JsonBody::Bool(b) => b.to_string(),
            JsonBody::Null | JsonBody::Array(_) | JsonBody::Object(_) => return None,
        };
        (!text.is_empty()).then_some(text)
    }
}

/// One spelling per numeric value: integers in decimal, integral floats as integers (when
/// exact), other floats in Rust's shortest round-trip form.
fn number_key(n: &serde_json::Number) -> String {
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    // 2^53: beyond it not every integer is a float, and the float spelling is kept.
    if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
        // Exact: the value is an integer of at most 53 bits.
        return format!("{}", f as i64);
    }
    format!("{f}")
}

impl<'de> Deserialize<'de> for JsonBody {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(BodyVisitor)
    }
}

/// Builds a [`JsonBody`], keeping every member.
struct BodyVisitor;

impl<'de> Visitor<'de> for BodyVisitor {
    type Value = JsonBody;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<JsonBody, E> {
        Ok(JsonBody::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<JsonBody, E> {
        Ok(JsonBody::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<JsonBody, E> {
        Ok(JsonBody::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<JsonBody, E> {
        serde_json::Number::from_f64(v).map(JsonBody::Number).ok_or_else(|| E::custom("not a finite number"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<JsonBody, E> {
        Ok(JsonBody::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<JsonBody, E> {
        Ok(JsonBody::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<JsonBody, E> {
        Ok(JsonBody::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<JsonBody, E> {
        Ok(JsonBody::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<JsonBody, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(JsonBody::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<JsonBody, A::Error> {
        let mut members = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, JsonBody>()? {
            members.push((k, v));
        }
        Ok(JsonBody::Object(members))
    }
}

/// True when some limit of `limits` reads the body.
pub fn needs_body(limits: &[RouteLimit]) -> bool {
    limits.iter().any(|l| l.key.needs_body())
}

/// The JSON pointers the `json:` key parts of `limits` read.
fn pointers(limits: &[RouteLimit]) -> impl Iterator<Item = &str> {
    limits.iter().flat_map(|l| l.key.parts.iter().flatten()).filter_map(KeySource::json_pointer)
}

/// The JSON that `json:` key parts of `limits` read from a body whose first bytes are `bytes`
/// (`complete`: the whole body fit in them).
///
/// A body larger than the bound is forwarded intact and, like an empty body or a missing
/// field, has no key: such requests share one "absent" key, so together they get one account's
/// allowance, never one each. A complete body that cannot be keyed is refused: not JSON, a keyed
/// field that is an array or an object, or one that is ambiguous.
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
/// assert_eq!(keyable_json(&limits, br#"{"email":"a","email":"b"}"#, true), Err(BodyRefusal::Ambiguous));
/// assert_eq!(keyable_json(&limits, br#"{"email":"#, false), Ok(None)); // too large: absent
/// ```
pub fn keyable_json(limits: &[RouteLimit], bytes: &[u8], complete: bool) -> Result<Option<JsonBody>, BodyRefusal> {
    if !complete || bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let json = serde_json::from_slice::<JsonBody>(bytes).map_err(|_| BodyRefusal::NotJson)?;
    for p in pointers(limits) {
        if matches!(json.pointer(p)?, Some(JsonBody::Array(_) | JsonBody::Object(_))) {
            return Err(BodyRefusal::NotScalar);
        }
    }
    Ok(Some(json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(text: &str) -> JsonBody {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        let b = body(r#"{"a/b":{"m~n":[10,{"x":"deep"}]},"":1}"#);
        assert_eq!(b.pointer("/a~1b/m~0n/1/x").unwrap(), Some(&JsonBody::String("deep".into())));
        assert_eq!(b.pointer("/a~1b/m~0n/0").unwrap().and_then(JsonBody::key_text).as_deref(), Some("10"));
        assert_eq!(b.pointer("/a~1b/m~0n/01").unwrap(), None);
        assert_eq!(b.pointer("/a~1b/m~0n/-").unwrap(), None);
        assert_eq!(b.pointer("/").unwrap().and_then(JsonBody::key_text).as_deref(), Some("1"));
        assert_eq!(b.pointer("/nope/x").unwrap(), None);
    }

    #[test]
    fn ambiguity_is_judged_on_the_path_only() {
        // Duplicates elsewhere do not matter; on the path they do, at any depth.
        let b = body(r#"{"other":1,"other":2,"user":{"email":"a@x"}}"#);
        assert!(b.pointer("/user/email").unwrap().is_some());
        let b = body(r#"{"user":{"email":"a@x"},"User":{"email":"victim@x"}}"#);
        assert_eq!(b.pointer("/user/email"), Err(BodyRefusal::Ambiguous));
        let b = body(r#"{"user":{"EMAIL":"victim@x"}}"#);
        assert_eq!(b.pointer("/user/email"), Err(BodyRefusal::Ambiguous));
    }

    #[test]
    fn numbers_are_keyed_by_value() {
        let k = |t: &str| body(t).key_text().unwrap();
        assert_eq!(k("42"), "42");
        assert_eq!(k("42.0"), "42");
        assert_eq!(k("4.2e1"), "42");
        assert_eq!(k("-7"), "-7");
        assert_eq!(k("-7.0"), "-7");
        assert_eq!(k("0.5"), "0.5");
        assert_eq!(k("18446744073709551615"), "18446744073709551615");
        assert_ne!(k("1.5"), k("1"));
        // A number and the same digits as a string share a key (upstreams coerce one to the other).
        assert_eq!(k("7"), k("\"7\""));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        #[test]
        fn any_bytes_are_keyed_or_refused_never_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let limits = sluice_config::parse("t.toml", "[[policy]]\nname = \"p\"\nalgorithm = \"fixed-window\"\nlimit = 3\nwindow = \"1s\"\n[[route]]\npath = \"/r\"\nlimits = [{ policy = \"p\", key = \"json:/a/0/b\" }]\n").unwrap().routes[0].limits.clone();
            let _ = keyable_json(&limits, &bytes, true);
        }

        #[test]
        fn json_like_text_never_panics(text in r#"[\[\]{}:,"a-eA-E0-9 .\-+\\]{0,120}"#) {
            if let Ok(b) = serde_json::from_str::<JsonBody>(&text) {
                let _ = b.pointer("/a/0/b").map(|v| v.and_then(JsonBody::key_text));
            }
        }

        #[test]
        fn a_repeated_or_case_folded_member_is_always_refused(
            name in "[a-z]{1,8}", first in "[a-z@.]{1,10}", second in "[a-z@.]{1,10}", upper in any::<bool>(),
        ) {
            let other = if upper { name.to_ascii_uppercase() } else { name.clone() };
            let text = format!(r#"{{"{name}":"{first}","{other}":"{second}"}}"#);
            let parsed = body(&text);
            prop_assert_eq!(parsed.pointer(&format!("/{name}")), Err(BodyRefusal::Ambiguous));
        }
    }
}
