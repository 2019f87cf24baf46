//! envoyproxy/ratelimit's `POST /json`: the same request and response as the gRPC call, in
//! protobuf's JSON mapping (field names in lowerCamelCase or as in the proto, enums by name,
//! zero values left out); 200 when OK, 429 when over the limit, 400 for a request it cannot
//! read, 500 when the service fails.
//!
//! ```
//! let r = sluice_rls::json::parse_request(br#"{"domain": "d", "descriptors": [{"entries": [{"key": "k", "value": "v"}]}], "hitsAddend": 2}"#).unwrap();
//! assert_eq!((r.domain.as_str(), r.hits_addend), ("d", 2));
//! assert_eq!(r.descriptors[0].entries[0].value, "v");
//! ```

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{Entry, RateLimitOverride};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use serde_json::{Map, Value, json};

/// A field of `obj` under its JSON name or its proto name.
fn field<'a>(obj: &'a Map<String, Value>, json_name: &str, proto_name: &str) -> Option<&'a Value> {
    obj.get(json_name).or_else(|| obj.get(proto_name)).filter(|v| !v.is_null())
}

/// An unsigned integer as the JSON mapping writes it: a number, or a string of digits.
fn uint(v: &Value, what: &str) -> Result<u64, String> {
    match v {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("{what} must be an unsigned integer"))
}

fn string(v: Option<&Value>, what: &str) -> Result<String, String> {
    match v {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{what} must be a string")),
    }
}

/// Reads a `RateLimitRequest` from its JSON mapping.
pub fn parse_request(body: &[u8]) -> Result<RateLimitRequest, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("the request must be a JSON object")?;
    let domain = string(field(obj, "domain", "domain"), "domain")?;
    let hits_addend = field(obj, "hitsAddend", "hits_addend").map(|v| uint(v, "hitsAddend")).transpose()?.unwrap_or(0);
    let hits_addend = u32::try_from(hits_addend).map_err(|_| "hitsAddend does not fit in 32 bits")?;
    let mut descriptors = Vec::new();
    if let Some(list) = field(obj, "descriptors", "descriptors") {
        for d in list.as_array().ok_or("descriptors must be a list")? {
            descriptors.push(descriptor(d)?);
        }
    }
    Ok(RateLimitRequest { domain, descriptors, hits_addend })
}

fn descriptor(v: &Value) -> Result<RateLimitDescriptor, String> {
    let obj = v.as_object().ok_or("a descriptor must be an object")?;
    let mut entries = Vec::new();
    if let Some(list) = field(obj, "entries", "entries") {
        for e in list.as_array().ok_or("entries must be a list")? {
            let e = e.as_object().ok_or("an entry must be an object")?;
            entries.push(Entry {
                key: string(field(e, "key", "key"), "key")?,
                value: string(field(e, "value", "value"), "value")?,
            });
        }
    }
    let limit = match field(obj, "limit", "limit") {
        None => None,
        Some(l) => {
            let l = l.as_object().ok_or("limit must be an object")?;
            let rpu =
                field(l, "requestsPerUnit", "requests_per_unit").map(|v| uint(v, "requestsPerUnit")).transpose()?;
            let unit = match field(l, "unit", "unit") {
                None => 0,
                Some(Value::String(s)) => PbUnit::from_str_name(s).ok_or(format!("unknown unit `{s}`"))? as i32,
                Some(n) => i32::try_from(uint(n, "unit")?).map_err(|_| "unit out of range")?,
            };
            let requests_per_unit = u32::try_from(rpu.unwrap_or(0)).map_err(|_| "requestsPerUnit out of range")?;
            Some(RateLimitOverride { requests_per_unit, unit })
        }
    };
    let hits_addend = field(obj, "hitsAddend", "hits_addend")
        .map(|v| {
            // UInt64Value: a bare number, or (leniently) an object holding `value`.
            let v = v.as_object().and_then(|o| o.get("value")).unwrap_or(v);
            uint(v, "hitsAddend").map(|value| UInt64Value { value })
        })
        .transpose()?;
    let is_negative_hits = match field(obj, "isNegativeHits", "is_negative_hits") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err("isNegativeHits must be true or false".into()),
    };
    Ok(RateLimitDescriptor { entries, limit, hits_addend, is_negative_hits })
}

/// A `RateLimitResponse` in the JSON mapping (zero values left out, as protobuf's encoder does).
pub fn response_json(r: &RateLimitResponse) -> Value {
    let code = |c: i32| Code::try_from(c).map_or("UNKNOWN", |c| c.as_str_name());
    let mut out = Map::new();
    out.insert("overallCode".into(), json!(code(r.overall_code)));
    let statuses: Vec<Value> = r
        .statuses
        .iter()
        .map(|s| {
            let mut o = Map::new();
            o.insert("code".into(), json!(code(s.code)));
            if let Some(l) = &s.current_limit {
                let mut lim = Map::new();
                if !l.name.is_empty() {
                    lim.insert("name".into(), json!(l.name));
                }
                if l.requests_per_unit != 0 {
                    lim.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
                }
                let unit = PbUnit::try_from(l.unit).map_or("UNKNOWN", |u| u.as_str_name());
                lim.insert("unit".into(), json!(unit));
                o.insert("currentLimit".into(), Value::Object(lim));
            }
            if s.limit_remaining != 0 {
                o.insert("limitRemaining".into(), json!(s.limit_remaining));
            }
            if let Some(d) = &s.duration_until_reset {
                o.insert("durationUntilReset".into(), json!(duration_text(d.seconds, d.nanos)));
            }
            Value::Object(o)
        })
        .collect();
    if !statuses.is_empty() {
        out.insert("statuses".into(), Value::Array(statuses));
    }
    if !r.response_headers_to_add.is_empty() {
        let headers: Vec<Value> =
            r.response_headers_to_add.iter().map(|h| json!({"key": h.key, "value": h.value})).collect();
        out.insert("responseHeadersToAdd".into(), Value::Array(headers));
    }
    Value::Object(out)
}

/// A `google.protobuf.Duration` in the JSON mapping: seconds with 0, 3, 6 or 9 decimals, `s`.
///
/// ```
/// use sluice_rls::json::duration_text;
/// assert_eq!(duration_text(59, 0), "59s");
/// assert_eq!(duration_text(1, 500_000_000), "1.500s");
/// assert_eq!(duration_text(0, 1_500), "0.000001500s");
/// ```
pub fn duration_text(seconds: i64, nanos: i32) -> String {
    match nanos {
        0 => format!("{seconds}s"),
        n if n % 1_000_000 == 0 => format!("{seconds}.{:03}s", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{seconds}.{:06}s", n / 1_000),
        n => format!("{seconds}.{n:09}s"),
    }
}

/// The HTTP status of a response: 429 when over the limit, 500 when unknown, else 200.
pub fn status_of(r: &RateLimitResponse) -> http::StatusCode {
    match Code::try_from(r.overall_code) {
        Ok(Code::OverLimit) => http::StatusCode::TOO_MANY_REQUESTS,
        Ok(Code::Ok) => http::StatusCode::OK,
        _ => http::StatusCode::INTERNAL_SERVER_ERROR,
    }
}
