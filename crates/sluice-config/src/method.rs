//! How routes read a request's method: the one rule every face applies.
//!
//! Methods match whatever their case (`get` is `GET` to most frameworks), and a route of `GET`
//! also limits `HEAD` (every common framework runs the GET handler for HEAD). Keys that read the
//! method read it the same way, so `head /a` and `GET /a` share an allowance.

use std::borrow::Cow;

/// The method as routes match it: upper case, `HEAD` as `GET`. Borrows the common spellings.
///
/// ```
/// use sluice_config::method;
/// assert_eq!(method::normal("head"), "GET");
/// assert_eq!(method::normal("post"), "POST");
/// ```
pub fn normal(method: &str) -> Cow<'_, str> {
    if method.eq_ignore_ascii_case("HEAD") {
        return Cow::Borrowed("GET");
    }
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        Cow::Owned(method.to_ascii_uppercase())
    } else {
        Cow::Borrowed(method)
    }
}

/// True when the request method `method` is one of `configured` (upper case, as validation
/// writes them): case-insensitively, `HEAD` as `GET`.
///
/// ```
/// use sluice_config::method;
/// assert!(method::matches(&["GET".to_string()], "head"));
/// assert!(!method::matches(&["POST".to_string()], "GET"));
/// ```
pub fn matches(configured: &[String], method: &str) -> bool {
    // A route written `HEAD` still takes HEAD requests: the request's own spelling is tried first.
    configured.iter().any(|m| m.eq_ignore_ascii_case(method) || (m == "GET" && method.eq_ignore_ascii_case("HEAD")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(list: &[&str]) -> Vec<String> {
        list.iter().map(|m| m.to_string()).collect()
    }

    #[test]
    fn head_is_get_in_any_case() {
        for m in ["HEAD", "head", "Head", "GET", "get", "gEt"] {
            assert_eq!(normal(m), "GET", "{m}");
            assert!(matches(&ms(&["GET"]), m), "{m}");
        }
    }

    #[test]
    fn other_methods_are_upper_cased_and_borrowed_when_already_upper() {
        assert_eq!(normal("delete"), "DELETE");
        assert!(matches!(normal("POST"), Cow::Borrowed("POST")));
        assert!(matches(&ms(&["PUT", "DELETE"]), "delete"));
    }

    #[test]
    fn a_head_route_takes_head_only_and_others_do_not_cross() {
        assert!(matches(&ms(&["HEAD"]), "head"));
        assert!(!matches(&ms(&["HEAD"]), "GET"));
        assert!(!matches(&ms(&["POST"]), "GET"));
        assert!(!matches(&ms(&["GET"]), "POST"));
    }
}
