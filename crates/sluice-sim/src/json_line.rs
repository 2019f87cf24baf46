//! Access logs written as JSON lines (nginx `log_format ... escape=json`, Caddy, most log
//! shippers), one object per line, with field names chosen by the user.
//!
//! Each *role* (what the simulation needs) is read from a named field; a dot descends into a
//! nested object (`request.remote_ip`). The defaults are nginx's variable names, the names most
//! JSON `log_format`s use:
//!
//! | role | default field | what it is |
//! |---|---|---|
//! | `time` | `time` | RFC 3339 (`$time_iso8601`), a common-log time (`$time_local`), or Unix seconds with a fraction (`$msec`, a number or a string) |
//! | `ip` | `remote_addr` | the address that connected (a port after it is allowed) |
//! | `method` | `request_method` | the method |
//! | `path` | `request_uri` | the request target; its query string is removed |
//! | `request` | `request` | the request line `GET /path HTTP/1.1`, read when `method` or `path` is absent |
//! | `user_agent` | `http_user_agent` | the `User-Agent` header |
//! | `referer` | `http_referer` | the `Referer` header |
//! | `xff` | `http_x_forwarded_for` | the `X-Forwarded-For` header |
//! | `bytes` | `body_bytes_sent` | the response's body bytes (a number, or digits in a string): what a `response-bytes` limit is charged |
//! | `duration` | `request_time` | how long the request was in flight, in seconds (`0.153`, a number or a string): how long it holds a concurrency limit's slot |
//! | `header:NAME` | — | any other header, e.g. `header:x-api-key=api_key` |
//!
//! A header field that is absent, `null`, empty or `-` leaves the header absent; an array of
//! strings is one header of the values joined by `, `. A wanted field given twice makes the line
//! malformed (which one would the server have seen?).
//!
//! ```
//! use sluice_sim::{JsonFields, LogRequest};
//! let fields: JsonFields = "time=ts,ip=client,path=uri,method=m,header:x-api-key=key".parse().unwrap();
//! let mut r = LogRequest::default();
//! let line = br#"{"ts": 971211336.5, "client": "203.0.113.7", "m": "GET", "uri": "/api/x?y=1", "key": "k-1"}"#;
//! fields.parse(line, &mut r).unwrap();
//! assert_eq!((r.at, r.method(), r.path()), (971_211_336_500_000_000, "GET", "/api/x"));
//! let names = fields.header_names();
//! assert_eq!(r.headers().map(|(i, v)| (names[i].as_str(), v)).collect::<Vec<_>>(), [("x-api-key", &b"k-1"[..])]);
//! ```

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use thiserror::Error;

use crate::log_request::{LineError, LogRequest, parse_address};
use crate::log_time::{parse_log_time, parse_unix_seconds};

/// The default field of each role, as `--json-fields` writes them.
pub const DEFAULT_JSON_FIELDS: &str = "time=time,ip=remote_addr,method=request_method,path=request_uri,\
request=request,user_agent=http_user_agent,referer=http_referer,xff=http_x_forwarded_for,bytes=body_bytes_sent,duration=request_time";

/// What a field of a JSON line is read as.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Time,
    Ip,
    Method,
    Path,
    Request,
    /// The response's body bytes.
    Bytes,
    /// How long the request was in flight, in seconds.
    Duration,
    /// Header number `i` of [`JsonFields::header_names`].
    Header(usize),
}

/// A field name split at its dots, as a tree: one lookup per key of the line.
#[derive(Debug, Clone, Default)]
struct Node {
    /// The key at this level.
    name: String,
    /// The slot a value here goes to, for a leaf.
    slot: Option<usize>,
    /// Keys one level down, for an object.
    children: Vec<Node>,
}

/// Why a `--json-fields` list was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FieldsError {
    /// Not `ROLE=FIELD`.
    #[error("`{0}` is not ROLE=FIELD")]
    Shape(String),
    /// A role that does not exist.
    #[error(
        "unknown role `{0}`: expected time, ip, method, path, request, bytes, duration, user_agent, referer, xff or header:NAME"
    )]
    UnknownRole(String),
    /// A field both read as a value and descended into (`a=x` and `b=x.y`).
    #[error("field `{0}` is read both as a value and as an object")]
    Conflict(String),
    /// Without a time or address there is nothing to simulate.
    #[error("the `{0}` role needs a field")]
    Required(&'static str),
}

/// Which field of a JSON line holds what (see the module documentation).
#[derive(Debug, Clone)]
pub struct JsonFields {
    /// Each role and its field, in the order given.
    roles: Vec<(Role, String)>,
    /// The header of each `Role::Header`, lower case.
    headers: Vec<String>,
    /// The field names as a tree; slot `i` is `roles[i]`.
    tree: Node,
}

impl Default for JsonFields {
    fn default() -> Self {
        DEFAULT_JSON_FIELDS.parse().expect("the defaults are valid")
    }
}

impl FromStr for JsonFields {
    type Err = FieldsError;

    /// Reads `ROLE=FIELD,...` over the defaults: a role given replaces its default, `ROLE=`
    /// (no field) drops it.
    fn from_str(spec: &str) -> Result<Self, FieldsError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let defaults = DEFAULT_JSON_FIELDS.split(',');
        let given = spec.split(',').map(str::trim).filter(|s| !s.is_empty());
        for item in defaults.chain(given) {
            let (role, field) = item.split_once('=').ok_or_else(|| FieldsError::Shape(item.to_string()))?;
            let role = role.trim().to_ascii_lowercase();
            let field = field.trim().to_string();
            match pairs.iter_mut().find(|(r, _)| *r == role) {
                Some(pair) => pair.1 = field,
                None => pairs.push((role, field)),
            }
        }
        let mut roles = Vec::new();
        let mut headers: Vec<String> = Vec::new();
        for (role, field) in pairs {
            let header = match role.as_str() {
                "user_agent" => Some("user-agent"),
                "referer" => Some("referer"),
                "xff" => Some("x-forwarded-for"),
                other => other.strip_prefix("header:").filter(|n| !n.is_empty()),
            };
            let r = match (role.as_str(), header) {
                (_, Some(_)) => Role::Header(headers.len()),
                ("time", _) => Role::Time,
                ("ip", _) => Role::Ip,
                ("method", _) => Role::Method,
                ("path", _) => Role::Path,
                ("request", _) => Role::Request,
                ("bytes", _) => Role::Bytes,
                ("duration", _) => Role::Duration,
                _ => return Err(FieldsError::UnknownRole(role.clone())),
            };
            if field.is_empty() {
                continue;
            }
            if let Some(name) = header {
                headers.push(name.to_string());
            }
            roles.push((r, field));
        }
        for (needed, name) in [(Role::Time, "time"), (Role::Ip, "ip")] {
            if !roles.iter().any(|(r, _)| *r == needed) {
                return Err(FieldsError::Required(name));
            }
        }
        let mut tree = Node::default();
        for (slot, (_, field)) in roles.iter().enumerate() {
            let mut node = &mut tree;
            for segment in field.split('.') {
                if node.slot.is_some() {
                    return Err(FieldsError::Conflict(field.clone()));
                }
                let i = match node.children.iter().position(|c| c.name == segment) {
                    Some(i) => i,
                    None => {
                        node.children.push(Node { name: segment.to_string(), ..Node::default() });
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[i];
            }
            if node.slot.is_some() || !node.children.is_empty() {
                return Err(FieldsError::Conflict(field.clone()));
            }
            node.slot = Some(slot);
        }
        Ok(Self { roles, headers, tree })
    }
}

impl fmt::Display for JsonFields {
    /// The roles in force, as `--json-fields` reads them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self
            .roles
            .iter()
            .map(|(role, field)| {
                let name = match role {
                    Role::Time => "time".to_string(),
                    Role::Ip => "ip".into(),
                    Role::Method => "method".into(),
                    Role::Path => "path".into(),
                    Role::Request => "request".into(),
                    Role::Bytes => "bytes".into(),
                    Role::Duration => "duration".into(),
                    Role::Header(i) => match self.headers[*i].as_str() {
                        "user-agent" => "user_agent".into(),
                        "referer" => "referer".into(),
                        "x-forwarded-for" => "xff".into(),
                        other => format!("header:{other}"),
                    },
                };
                format!("{name}={field}")
            })
            .collect();
        f.write_str(&items.join(","))
    }
}

/// A JSON object key, borrowed from the line when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> de::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

/// Visits one object, keeping the raw value of every wanted key and skipping the rest.
struct Picker<'t, 's, 'de> {
    /// The wanted keys at this level.
    node: &'t Node,
    /// Where the raw values go, by slot.
    slots: &'s mut [Option<&'de RawValue>],
}

impl<'de> DeserializeSeed<'de> for Picker<'_, '_, 'de> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Picker<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Key<'de>>()? {
            let Some(child) = self.node.children.iter().find(|c| c.name == key.0) else {
                map.next_value::<IgnoredAny>()?;
                continue;
            };
            let raw: &'de RawValue = map.next_value()?;
            match child.slot {
                Some(slot) if self.slots[slot].replace(raw).is_some() => {
                    return Err(de::Error::custom(format_args!("key `{}` appears twice", key.0)));
                }
                Some(_) => {}
                // Descend into an object; anything else there holds none of the wanted fields.
                None if raw.get().starts_with('{') => {
                    pick(raw.get(), child, self.slots).map_err(de::Error::custom)?;
                }
                None => {}
            }
        }
        Ok(())
    }
}

fn pick<'de>(text: &'de str, node: &Node, slots: &mut [Option<&'de RawValue>]) -> Result<(), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    Picker { node, slots }.deserialize(&mut de)?;
    de.end()
}

/// The text of a scalar JSON value: a string unescaped, a number or boolean as written;
/// `None` for `null`. An array of strings is its items joined by `, ` (repeated headers).
fn text_of<'de>(field: &str, raw: &'de RawValue) -> Result<Option<Cow<'de, str>>, LineError> {
    let s = raw.get();
    let wrong = |what: &str| LineError::Json(format!("field `{field}` is {what}"));
    match s.as_bytes().first() {
        Some(b'"') if !s.contains('\\') => Ok(Some(Cow::Borrowed(&s[1..s.len() - 1]))),
        Some(b'"') => serde_json::from_str::<String>(s).map(|v| Some(Cow::Owned(v))).map_err(|e| wrong(&e.to_string())),
        Some(b'n') => Ok(None),
        Some(b'[') => {
            let items: Vec<String> =
                serde_json::from_str(s).map_err(|_| wrong("an array of something else than strings"))?;
            Ok(Some(Cow::Owned(items.join(", "))))
        }
        Some(b'{') => Err(wrong("an object")),
        _ => Ok(Some(Cow::Borrowed(s))),
    }
}

impl JsonFields {
    /// The headers the lines may carry, as [`LogRequest::headers`] indexes them.
    pub fn header_names(&self) -> &[String] {
        &self.headers
    }

    /// Reads one JSON line (without its line break) into `out`.
    pub fn parse(&self, line: &[u8], out: &mut LogRequest) -> Result<(), LineError> {
        out.clear();
        if line.iter().all(u8::is_ascii_whitespace) {
            return Err(LineError::Empty);
        }
        let text = std::str::from_utf8(line).map_err(|_| LineError::Json("the line is not UTF-8".into()))?;
        let mut slots: Vec<Option<&RawValue>> = vec![None; self.roles.len()];
        pick(text, &self.tree, &mut slots).map_err(|e| LineError::Json(e.to_string()))?;
        let mut method = None;
        let mut target = None;
        let mut request = None;
        let (mut time, mut ip) = (None, None);
        for ((role, field), raw) in self.roles.iter().zip(&slots) {
            let Some(raw) = raw else { continue };
            match role {
                Role::Time => time = Some((field, *raw)),
                Role::Ip => ip = text_of(field, raw)?,
                Role::Method => method = text_of(field, raw)?,
                Role::Path => target = text_of(field, raw)?,
                Role::Request => request = text_of(field, raw)?,
                Role::Bytes => {
                    if let Some(v) = text_of(field, raw)? {
                        out.set_sent(field, v.as_bytes())?;
                    }
                }
                Role::Duration => {
                    if let Some(v) = text_of(field, raw)? {
                        out.set_took(field, v.as_bytes())?;
                    }
                }
                Role::Header(i) => {
                    if let Some(v) = text_of(field, raw)? {
                        out.add_header(*i, v.as_bytes(), false);
                    }
                }
            }
        }
        let field_of = |want: Role| self.roles.iter().find(|(r, _)| *r == want).map_or("", |(_, f)| f.as_str());
        let (time_field, raw) =
            time.ok_or_else(|| LineError::Missing(format!("`{}` field (time)", field_of(Role::Time))))?;
        let raw_text = raw.get();
        out.at = if raw_text.starts_with('"') {
            let t = text_of(time_field, raw)?.unwrap_or_default();
            parse_log_time(&t)?
        } else if raw_text.starts_with(|c: char| c.is_ascii_digit()) {
            parse_unix_seconds(raw_text)?
        } else {
            return Err(LineError::Json(format!("field `{time_field}` is not a time")));
        };
        let ip = ip.ok_or_else(|| LineError::Missing(format!("`{}` field (client address)", field_of(Role::Ip))))?;
        out.peer = parse_address(ip.as_bytes())?;
        match (method, target, request) {
            (Some(m), Some(t), _) if !m.is_empty() && !t.is_empty() => {
                out.set_method(m.as_bytes());
                out.set_target(t.as_bytes());
            }
            (_, _, Some(line)) => out.set_request_line(line.as_bytes(), false)?,
            _ => {
                return Err(LineError::Missing(format!(
                    "`{}` and `{}` fields, nor a `{}` line (method and path)",
                    field_of(Role::Method),
                    field_of(Role::Path),
                    field_of(Role::Request)
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::NANOS_PER_SEC;

    const T: u64 = 971_211_336 * NANOS_PER_SEC;

    fn parse(fields: &JsonFields, line: &str) -> Result<LogRequest, LineError> {
        let mut r = LogRequest::default();
        fields.parse(line.as_bytes(), &mut r).map(|()| r)
    }

    fn headers(fields: &JsonFields, r: &LogRequest) -> Vec<(String, String)> {
        r.headers().map(|(i, v)| (fields.header_names()[i].clone(), String::from_utf8_lossy(v).into_owned())).collect()
    }

    #[test]
    fn nginx_defaults() {
        let f = JsonFields::default();
        let r = parse(
            &f,
            r#"{"time":"2000-10-10T13:55:36-07:00","remote_addr":"10.0.0.1","request_method":"POST",
               "request_uri":"/api/login?next=/","status":"200","http_user_agent":"curl/8","http_referer":"",
               "http_x_forwarded_for":"203.0.113.7"}"#
                .replace('\n', "")
                .as_str(),
        )
        .unwrap();
        assert_eq!((r.at, r.peer.to_string(), r.method(), r.path()), (T, "10.0.0.1".into(), "POST", "/api/login"));
        assert_eq!(
            headers(&f, &r),
            [("user-agent".into(), "curl/8".into()), ("x-forwarded-for".into(), "203.0.113.7".into())]
        );
    }

    #[test]
    fn custom_nested_fields_and_every_time_form() {
        let f: JsonFields = "time=ts,ip=request.remote_ip,request=,method=request.method,path=request.uri,\
                             header:x-api-key=request.headers.X-Api-Key"
            .parse()
            .unwrap();
        let line = |ts: &str| {
            format!(
                r#"{{"ts":{ts},"level":"info","request":{{"remote_ip":"203.0.113.9","method":"GET","uri":"/a?b",
                   "headers":{{"X-Api-Key":["k1","k2"]}}}}}}"#
            )
            .replace('\n', "")
        };
        for ts in [
            "971211336",
            "971211336.0",
            r#""971211336""#,
            r#""2000-10-10T20:55:36Z""#,
            r#""10/Oct/2000:13:55:36 -0700""#,
        ] {
            let r = parse(&f, &line(ts)).unwrap();
            assert_eq!(r.at, T, "{ts}");
            assert_eq!(r.peer.to_string(), "203.0.113.9");
            assert_eq!(headers(&f, &r), [("x-api-key".into(), "k1, k2".into())]);
        }
        assert_eq!(parse(&f, &line("971211336.000000001")).unwrap().at, T + 1);
        assert!(parse(&f, &line("true")).unwrap_err().to_string().contains("not a time"));
    }

    #[test]
    fn the_request_line_stands_in_for_method_and_path() {
        let f = JsonFields::default();
        let r = parse(&f, r#"{"time":"971211336","remote_addr":"1.2.3.4","request":"GET /x?y HTTP/1.1"}"#).unwrap();
        assert_eq!((r.method(), r.path()), ("GET", "/x"));
        let e = parse(&f, r#"{"time":"971211336","remote_addr":"1.2.3.4"}"#).unwrap_err();
        assert!(e.to_string().contains("`request_method` and `request_uri` fields"), "{e}");
    }

    #[test]
    fn malformed_lines_say_what_is_wrong() {
        let f = JsonFields::default();
        for (line, want) in [
            ("", "empty line"),
            ("[1,2]", "expected a JSON object"),
            ("{\"time\":1", "EOF"),
            (r#"{"time":"1","time":"2","remote_addr":"1.2.3.4","request":"GET / HTTP/1.1"}"#, "appears twice"),
            (r#"{"remote_addr":"1.2.3.4","request":"GET / HTTP/1.1"}"#, "no `time` field"),
            (r#"{"time":"1","request":"GET / HTTP/1.1"}"#, "no `remote_addr` field"),
            (r#"{"time":"1","remote_addr":"nobody","request":"GET / HTTP/1.1"}"#, "not an IP address"),
            (r#"{"time":"1","remote_addr":{"a":1},"request":"GET / HTTP/1.1"}"#, "is an object"),
            (r#"{"time":"soon","remote_addr":"1.2.3.4","request":"GET / HTTP/1.1"}"#, "time:"),
            (r#"{"time":1} {}"#, "trailing characters"),
        ] {
            let e = parse(&f, line).unwrap_err().to_string();
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn field_lists_are_checked() {
        assert!(matches!("time".parse::<JsonFields>(), Err(FieldsError::Shape(_))));
        assert!(matches!("colour=c".parse::<JsonFields>(), Err(FieldsError::UnknownRole(_))));
        assert!(matches!("time=".parse::<JsonFields>(), Err(FieldsError::Required("time"))));
        assert!(matches!("time=a,ip=a.b".parse::<JsonFields>(), Err(FieldsError::Conflict(_))));
        assert!(matches!("time=a.b,ip=a".parse::<JsonFields>(), Err(FieldsError::Conflict(_))));
        let f: JsonFields = "time=ts,user_agent=".parse().unwrap();
        assert!(!f.to_string().contains("http_user_agent"), "{f}");
        assert_eq!(f.header_names(), ["referer", "x-forwarded-for"]);
        assert!(f.to_string().starts_with("time=ts,ip=remote_addr,"), "{f}");
        assert_eq!(JsonFields::default().to_string(), DEFAULT_JSON_FIELDS);
    }
}
