//! The `RateLimit` field of draft-ietf-httpapi-ratelimit-headers-10: a structured-field List
//! (RFC 9651) of service limit items, one for each quota policy that applies to the request.
//!
//! An item is a String naming the policy, with parameters: `r`, required, the quota units left
//! (a non-negative Integer); `t`, optional, the seconds until more quota is made available (a
//! non-negative Integer). Other parameters (`pk`, vendor ones) are comments and are skipped.
//!
//! The wait the field asks for is the longest `t` among the items with `r=0`: a request passes
//! only once every exhausted policy has quota again. Items with quota left ask for no wait, and
//! an exhausted item without `t` names no time; a field with no exhausted item that has a `t`
//! asks for no wait at all.
//!
//! The field is parsed as RFC 9651 says, by the `sfv` crate, and several field lines form one
//! list. The draft says malformed `RateLimit` fields must be ignored, so the whole field is
//! ignored when it does not parse as a List or when any member is not a service limit item: an
//! inner list, a value that is not a String, an `r` that is missing or not a non-negative
//! Integer, a `t` that is not a non-negative Integer.
//!
//! ```
//! use http::{HeaderMap, HeaderValue};
//! use sluice_client::{DelaySource, server_delay};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("ratelimit", HeaderValue::from_static(r#""per-ip";r=0;t=30, "burst";r=5;t=2"#));
//! assert_eq!(server_delay(&headers, 0), Some((30_000_000_000, DelaySource::RateLimit)));
//!
//! // One policy without its required `r`: the whole field is ignored.
//! headers.insert("ratelimit", HeaderValue::from_static(r#""per-ip";r=0;t=30, "burst";t=2"#));
//! assert_eq!(server_delay(&headers, 0), None);
//! ```

use http::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};
use sluice_core::{NANOS_PER_SEC, Nanos};

/// One member of the `RateLimit` list, as far as waiting goes.
struct ServiceLimit {
    /// `r`: quota units left; 0 means the policy is exhausted.
    remaining: u64,
    /// `t`: seconds until more quota is made available, when the server says.
    reset: Option<u64>,
}

/// The wait the `RateLimit` fields of `headers` ask for, in nanoseconds (saturating): the
/// longest `t` of a policy with `r=0`. `None` when the field is absent or malformed, or names no
/// exhausted policy with a `t`.
pub(crate) fn exhausted_wait(headers: &HeaderMap) -> Option<Nanos> {
    service_limits(headers)?
        .iter()
        .filter(|limit| limit.remaining == 0)
        .filter_map(|limit| limit.reset)
        .max()
        .map(|t| t.saturating_mul(NANOS_PER_SEC))
}

/// Every member of the field's lines taken as one list; `None` if any line or member is malformed.
fn service_limits(headers: &HeaderMap) -> Option<Vec<ServiceLimit>> {
    let mut lines = headers.get_all("ratelimit").iter();
    let mut list: List = Parser::new(lines.next()?.as_bytes()).parse().ok()?;
    for line in lines {
        Parser::new(line.as_bytes()).parse_list_with_visitor(&mut list).ok()?;
    }
    list.iter().map(service_limit).collect()
}

fn service_limit(member: &ListEntry) -> Option<ServiceLimit> {
    let ListEntry::Item(item) = member else { return None };
    item.bare_item.as_string()?;
    let remaining = non_negative(item.params.get("r")?)?;
    let reset = match item.params.get("t") {
        Some(t) => Some(non_negative(t)?),
        None => None,
    };
    Some(ServiceLimit { remaining, reset })
}

fn non_negative(value: &BareItem) -> Option<u64> {
    u64::try_from(i64::from(value.as_integer()?)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn wait(lines: &[&str]) -> Option<u64> {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append("ratelimit", HeaderValue::from_str(line).unwrap());
        }
        exhausted_wait(&h).map(|ns| ns / NANOS_PER_SEC)
    }

    #[test]
    fn the_longest_reset_of_an_exhausted_policy_wins() {
        assert_eq!(wait(&[r#""default";r=0;t=30"#]), Some(30));
        assert_eq!(wait(&[r#""per-ip";r=0;t=30, "burst";r=5;t=2"#]), Some(30));
        assert_eq!(wait(&[r#""burst";r=5;t=1, "day";r=0;t=3600, "hour";r=0;t=60"#]), Some(3600));
        // An exhausted policy may reset sooner than one with quota left: only r=0 counts.
        assert_eq!(wait(&[r#""a";r=0;t=5, "b";r=3;t=500"#]), Some(5));
        // Partition keys and vendor parameters are comments.
        assert_eq!(wait(&[r#""user";r=0;t=12;pk=:cHsdsRa894==:;acme-x=?1"#]), Some(12));
        // A zero reset: retry at once.
        assert_eq!(wait(&[r#""p";r=0;t=0"#]), Some(0));
    }

    #[test]
    fn several_field_lines_form_one_list() {
        assert_eq!(wait(&[r#""a";r=0;t=5"#, r#""b";r=0;t=9"#]), Some(9));
        assert_eq!(wait(&[r#""a";r=0;t=5"#, r#""b";r=1;t=9"#]), Some(5));
        // A malformed second line spoils the whole field.
        assert_eq!(wait(&[r#""a";r=0;t=5"#, r#""b";r=0;t=-9"#]), None);
    }

    #[test]
    fn no_exhausted_policy_or_no_reset_asks_for_no_wait() {
        assert_eq!(wait(&[r#""p";r=1;t=30"#]), None);
        assert_eq!(wait(&[r#""p";r=0"#]), None, "exhausted, but no time given");
        assert_eq!(wait(&[r#""p";r=0, "q";r=0;t=4"#]), Some(4));
    }

    #[test]
    fn quoted_names_may_hold_separators() {
        assert_eq!(wait(&[r#""a;b,c\"d";r=0;t=7"#]), Some(7));
    }

    #[test]
    fn malformed_fields_are_ignored_whole() {
        for v in [
            r#""p";r=0;t=-3"#,               // negative reset
            r#""p";r=-1;t=3"#,               // negative remaining
            r#""p";r=0;t=1234567890123456"#, // 16 digits: not a structured-field Integer
            r#""p";r=0;t=1.5"#,              // a Decimal, not an Integer
            r#""p";r=0;t="30""#,             // a String, not an Integer
            r#""p";t=30"#,                   // r is required
            r#";r=0;t=3"#,                   // no item at all
            r#"p;r=0;t=3"#,                  // a Token, not a String, names the policy
            r#"("p" "q");r=0;t=3"#,          // an inner list
            r#""p";r=0;t=3,"#,               // a trailing comma
            r#""p";r=0;t=3, "q";t=9"#,       // one bad member spoils the rest
            r#""p";r=0;t=3 garbage"#,
            "",
        ] {
            assert_eq!(wait(&[v]), None, "{v}");
        }
        // Integers as large as the grammar allows saturate instead of overflowing.
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_static(r#""p";r=0;t=999999999999999"#));
        assert_eq!(exhausted_wait(&h), Some(u64::MAX));
    }

    #[test]
    fn bytes_that_are_not_text_are_ignored() {
        let mut h = HeaderMap::new();
        h.insert("ratelimit", HeaderValue::from_bytes(b"\"p\xff\";r=0;t=3").unwrap());
        assert_eq!(exhausted_wait(&h), None);
    }
}
