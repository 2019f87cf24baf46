//! Where a limit reads what a request really cost once its response arrives (`cost_from`): the
//! request reserves the limit's `cost` when it is admitted, and the reservation is settled to
//! what the response says. Read by the file's validator and by the tower layer's builder.

use std::fmt;

/// A source of a request's real cost in its response.
///
/// ```
/// use sluice_config::CostFrom;
/// let c = CostFrom::parse("response-header:X-Usage-Tokens").unwrap();
/// assert_eq!(c, CostFrom::ResponseHeader("x-usage-tokens".into()));
/// assert_eq!(c.to_string(), "response-header:x-usage-tokens");
/// assert!(CostFrom::parse("response-header:").is_err());
/// assert!(CostFrom::parse("response-header:bad name").is_err());
/// assert!(CostFrom::parse("request-header:x").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CostFrom {
    /// `response-header:NAME`: a whole number in one field line of the response header `NAME`
    /// (stored lowercase), read when the response head arrives.
    ResponseHeader(String),
}

impl CostFrom {
    /// Parses a `cost_from` value; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(name) = text.strip_prefix("response-header:") else {
            return Err(format!(
                "unknown cost source `{text}`: `response-header:NAME` settles the request's cost to the whole \
                 number in the response header NAME"
            ));
        };
        // A field name is an RFC 9110 token.
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(tchar) {
            return Err(format!("`{name}` is not a header name"));
        }
        Ok(CostFrom::ResponseHeader(name.to_ascii_lowercase()))
    }
}

impl fmt::Display for CostFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostFrom::ResponseHeader(name) => write!(f, "response-header:{name}"),
        }
    }
}
