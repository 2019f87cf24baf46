//! Which body a request gives to `json:` and `form:` key parts, or why the body is refused.
//!
//! The body is read by the face that has it (the gateway reads a bounded prefix); the rules for
//! what may be keyed live here, once. They are about ambiguity: a body that the application
//! behind sluice could read differently from sluice would let a client be limited as one account
//! while the application acts for another. So a keyed body is read only as what its content type
//! says and the route expects (a JSON body sent as a form is a form to Express and Rails), a keyed
//! field may not also be in the query string (Flask's `request.values` and PHP's `$_REQUEST` let
//! one override the other), and a keyed field must be unambiguous: no duplicate members
//! (first-wins readers see one, last-wins another), no member names that case-insensitive
//! binders (Go's `encoding/json`, ASP.NET) fold into the keyed one; for forms see
//! [`crate::form_body`].

use std::fmt;

use http::HeaderMap;
use http::header::CONTENT_TYPE;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use sluice_config::{BodyField, KeySource, Loosen, RouteLimit};

use crate::account::account_key;
pub use crate::body_refusal::BodyRefusal;
use crate::form_body::{FormBody, query_names};

/// How a keyed body is parsed, from its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// `application/json` or `application/*+json`.
    Json,
    /// `application/x-www-form-urlencoded`.
    Form,
}

/// A keyed body, parsed as its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyedBody {
    /// A JSON body.
    Json(JsonBody),
    /// A form body.
    Form(FormBody),
}

impl KeyedBody {
    /// The key text of `field` in this body (an account name, see [`account_key`]): `None` when
    /// the body does not have it, or is of the other kind.
    pub fn key_text(&self, field: BodyField<'_>) -> Option<String> {
        let text = match (self, field) {
            (KeyedBody::Json(j), BodyField::Json(p)) => j.pointer(p).ok().flatten().and_then(JsonBody::key_text)?,
            (KeyedBody::Form(f), BodyField::Form(name)) => f.field(name).ok().flatten()?,
            _ => return None,
        };
        let key = account_key(&text);
        (!key.is_empty()).then_some(key)
    }
}

/// Checks made before a keyed body is read: the fields the route's parts read are not also in
/// the query string (unless the route loosens `query`), and the content type is one the parts
/// read (unless it loosens `content-type`). Gives the kind to parse the body as; `None` when
/// the request has no content type (then only an empty body can be keyed: as absent).
///
/// ```
/// use sluice_http::body_key::{BodyKind, BodyRefusal, body_kind};
/// let route = &sluice_config::parse("t.toml", r#"
/// [[policy]]
/// name = "per-account"
/// algorithm = "fixed-window"
/// limit = 3
/// window = "15m"
/// [[route]]
/// path = "/reset"
/// limits = [{ policy = "per-account", key = "json:/email" }]
/// "#).unwrap().routes[0];
/// let typed = |t: &str| {
///     let mut h = http::HeaderMap::new();
///     h.insert("content-type", t.parse().unwrap());
///     h
/// };
/// let kind = |h: &http::HeaderMap, q: Option<&str>| body_kind(&route.limits, route.loosen, h, q);
/// assert_eq!(kind(&typed("application/json; charset=utf-8"), Some("lang=uk")), Ok(Some(BodyKind::Json)));
/// assert_eq!(kind(&typed("application/merge-patch+json"), None), Ok(Some(BodyKind::Json)));
/// assert_eq!(kind(&typed("application/x-www-form-urlencoded"), None), Err(BodyRefusal::ContentType));
/// assert_eq!(kind(&typed("application/json"), Some("email=victim%40x")), Err(BodyRefusal::FieldInQuery));
/// assert_eq!(kind(&http::HeaderMap::new(), None), Ok(None));
/// ```
pub fn body_kind(
    limits: &[RouteLimit],
    loosen: Loosen,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Option<BodyKind>, BodyRefusal> {
    if !loosen.query
        && let Some(q) = query
        && fields(limits).any(|f| query_names(q, &f.top_name()))
    {
        return Err(BodyRefusal::FieldInQuery);
    }
    let reads_json = fields(limits).any(|f| matches!(f, BodyField::Json(_)));
    let reads_form = fields(limits).any(|f| matches!(f, BodyField::Form(_)));
    let default = if reads_json { BodyKind::Json } else { BodyKind::Form };
    let mut lines = headers.get_all(CONTENT_TYPE).iter();
    let (line, again) = (lines.next(), lines.next());
    if again.is_some() {
        return if loosen.content_type { Ok(Some(default)) } else { Err(BodyRefusal::ContentType) };
    }
    let Some(line) = line else {
        return Ok(loosen.content_type.then_some(default));
    };
    let said = match media_type(line.as_bytes()) {
        Some(BodyKind::Json) if reads_json => Some(BodyKind::Json),
        Some(BodyKind::Form) if reads_form => Some(BodyKind::Form),
        _ => None,
    };
    match said {
        Some(kind) => Ok(Some(kind)),
        None if loosen.content_type => Ok(Some(default)),
        None => Err(BodyRefusal::ContentType),
    }
}

/// The body kind a `Content-Type` value names, if it names one sluice parses: the media type
/// (before any `;` parameter), trimmed, compared whatever its case.
fn media_type(value: &[u8]) -> Option<BodyKind> {
    let end = value.iter().position(|&b| b == b';').unwrap_or(value.len());
    let media = value[..end].trim_ascii().to_ascii_lowercase();
    if media == b"application/json" || (media.starts_with(b"application/") && media.ends_with(b"+json")) {
        return Some(BodyKind::Json);
    }
    (media == b"application/x-www-form-urlencoded").then_some(BodyKind::Form)
}

/// The body fields the key parts of `limits` read.
fn fields(limits: &[RouteLimit]) -> impl Iterator<Item = BodyField<'_>> {
    limits.iter().flat_map(|l| l.key.parts.iter().flatten()).filter_map(KeySource::body_field)
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

    /// The key text of a scalar, before [`account_key`] folds it: a string as it is, a number
    /// by its value (`1`, `1.0` and `1e0` are one key), a boolean as `true`/`false`; `None` for
    /// null, an array or an object.
    ///
    /// ```
    /// use sluice_http::body_key::JsonBody;
    /// let one = |t: &str| serde_json::from_str::<JsonBody>(t).unwrap().key_text();
    /// assert_eq!(one("1"), one("1.0"));
    /// assert_eq!(one("1e0").as_deref(), Some("1"));
    /// assert_eq!(one("\" Victim@Example.COM \"").as_deref(), Some(" Victim@Example.COM "));
    /// assert_eq!(one("[1]"), None);
    /// ```
    pub fn key_text(&self) -> Option<String> {
        Some(match self {
            JsonBody::String(s) => s.clone(),
            JsonBody::Number(n) => number_key(n),
            JsonBody::Bool(b) => b.to_string(),
            JsonBody::Null | JsonBody::Array(_) | JsonBody::Object(_) => return None,
        })
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

/// The body that the `json:` and `form:` key parts of `limits` read, parsed as `kind` (from
/// [`body_kind`]), from a body whose first bytes are `bytes` (`complete`: the whole body fit in
/// them).
///
/// A body larger than the bound is forwarded intact and, like an empty body or a missing
/// field, has no key: such requests share one "absent" key, so together they get one account's
/// allowance, never one each. A complete body that cannot be keyed is refused: not of its kind,
/// sent with no content type, a keyed field that is an array or an object, or one that is
/// ambiguous.
///
/// ```
/// use sluice_http::body_key::{BodyKind, BodyRefusal, keyable_body};
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
/// let json = Some(BodyKind::Json);
/// assert!(keyable_body(&limits, json, br#"{"email":"a@example.com"}"#, true).unwrap().is_some());
/// assert_eq!(keyable_body(&limits, json, b"email=a", true), Err(BodyRefusal::NotJson));
/// assert_eq!(keyable_body(&limits, json, br#"{"email":["a","b"]}"#, true), Err(BodyRefusal::NotScalar));
/// assert_eq!(keyable_body(&limits, json, br#"{"email":"a","email":"b"}"#, true), Err(BodyRefusal::Ambiguous));
/// assert_eq!(keyable_body(&limits, json, br#"{"email":"#, false), Ok(None)); // too large: absent
/// assert_eq!(keyable_body(&limits, None, b"", true), Ok(None)); // no body, no type: absent
/// assert_eq!(keyable_body(&limits, None, b"{}", true), Err(BodyRefusal::ContentType));
/// ```
pub fn keyable_body(
    limits: &[RouteLimit],
    kind: Option<BodyKind>,
    bytes: &[u8],
    complete: bool,
) -> Result<Option<KeyedBody>, BodyRefusal> {
    if !complete || bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match kind {
        None => Err(BodyRefusal::ContentType),
        Some(BodyKind::Json) => {
            let json = serde_json::from_slice::<JsonBody>(bytes).map_err(|_| BodyRefusal::NotJson)?;
            for f in fields(limits) {
                if let BodyField::Json(p) = f
                    && matches!(json.pointer(p)?, Some(JsonBody::Array(_) | JsonBody::Object(_)))
                {
                    return Err(BodyRefusal::NotScalar);
                }
            }
            Ok(Some(KeyedBody::Json(json)))
        }
        Some(BodyKind::Form) => {
            let form = FormBody::parse(bytes)?;
            for f in fields(limits) {
                if let BodyField::Form(name) = f {
                    form.field(name)?;
                }
            }
            Ok(Some(KeyedBody::Form(form)))
        }
    }
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
            let _ = keyable_body(&limits, Some(BodyKind::Json), &bytes, true);
            let _ = keyable_body(&limits, Some(BodyKind::Form), &bytes, true);
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
