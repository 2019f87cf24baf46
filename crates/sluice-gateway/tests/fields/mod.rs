//! The `ietf` rate-limit fields of a response, parsed as RFC 9651 Lists by `sfv`, the way a
//! client reads them (several field lines form one list).
#![allow(dead_code)]

use std::collections::BTreeMap;

use http::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};

/// One member of a `RateLimit-Policy` or `RateLimit` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The policy's name (the item, a String).
    pub name: String,
    /// Its Integer parameters (`q`, `w`, `r`, `t`).
    pub ints: BTreeMap<String, i64>,
    /// Its `pk`, when present (a Byte Sequence).
    pub pk: Option<Vec<u8>>,
}

impl Member {
    /// An Integer parameter (panics when absent).
    pub fn int(&self, key: &str) -> u64 {
        let v = self.ints.get(key).unwrap_or_else(|| panic!("{}: no `{key}` in {self:?}", self.name));
        u64::try_from(*v).expect("non-negative")
    }
}

/// The members of `field` in `headers`, in order; empty when absent. Panics when the field is
/// not a List of String items with Integer (or, for `pk`, Byte Sequence) parameters.
pub fn members(headers: &HeaderMap, field: &str) -> Vec<Member> {
    let mut lines = headers.get_all(field).iter();
    let Some(first) = lines.next() else { return Vec::new() };
    let mut list: List = Parser::new(first.as_bytes()).parse().unwrap_or_else(|e| panic!("{field}: {e}"));
    for line in lines {
        Parser::new(line.as_bytes()).parse_list_with_visitor(&mut list).unwrap_or_else(|e| panic!("{field}: {e}"));
    }
    list.iter().map(|entry| member(field, entry)).collect()
}

fn member(field: &str, entry: &ListEntry) -> Member {
    let ListEntry::Item(item) = entry else { panic!("{field}: an inner list") };
    let Some(name) = item.bare_item.as_string() else { panic!("{field}: {:?} is not a String", item.bare_item) };
    let (mut ints, mut pk) = (BTreeMap::new(), None);
    for (key, value) in &item.params {
        match value {
            BareItem::Integer(i) => _ = ints.insert(key.as_str().to_owned(), i64::from(*i)),
            BareItem::ByteSequence(b) if key.as_str() == "pk" => pk = Some(b.clone()),
            other => panic!("{field}: `{}` is {other:?}", key.as_str()),
        }
    }
    Member { name: name.as_str().to_owned(), ints, pk }
}

/// The names in `field`, in order.
pub fn names(headers: &HeaderMap, field: &str) -> Vec<String> {
    members(headers, field).into_iter().map(|m| m.name).collect()
}

/// `(name, r, t)` of each `RateLimit` member.
pub fn service_limits(headers: &HeaderMap) -> Vec<(String, u64, u64)> {
    members(headers, "ratelimit").into_iter().map(|m| (m.name.clone(), m.int("r"), m.int("t"))).collect()
}

/// `(name, q, w)` of each `RateLimit-Policy` member.
pub fn quota_policies(headers: &HeaderMap) -> Vec<(String, u64, u64)> {
    members(headers, "ratelimit-policy").into_iter().map(|m| (m.name.clone(), m.int("q"), m.int("w"))).collect()
}
