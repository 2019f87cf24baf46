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
/// let tokens = CostFrom::parse("response-json:/usage/total_tokens").unwrap();
/// assert_eq!(tokens, CostFrom::ResponseJson("/usage/total_tokens".into()));
/// assert_eq!(CostFrom::parse("response-bytes").unwrap(), CostFrom::ResponseBytes);
/// assert_eq!(CostFrom::parse("response-extension").unwrap(), CostFrom::ResponseExtension);
/// assert!(CostFrom::parse("response-header:").is_err());
/// assert!(CostFrom::parse("response-header:bad name").is_err());
/// assert!(CostFrom::parse("response-json:usage").is_err());
/// assert!(CostFrom::parse("response-json:/a~2b").is_err());
/// assert!(CostFrom::parse("request-header:x").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CostFrom {
    /// `response-header:NAME`: a whole number in one field line of the response header `NAME`
    /// (stored lowercase), read when the response head arrives.
    ResponseHeader(String),
    /// `response-json:POINTER`: the whole number at the RFC 6901 JSON pointer `POINTER` of the
    /// response body, read when the body ends; for a server-sent-event stream
    /// (`text/event-stream`), of the last event whose data has it (the usage an LLM API sends
    /// last), read when the stream ends or the client leaves.
    ResponseJson(String),
    /// `response-bytes`: the body bytes sent to the client, counted when the body ends or the
    /// client leaves.
    ResponseBytes,
    /// `response-extension`: what the tower layer's inner service reports in its response's
    /// extensions (`sluice_http::layer::UsedCost`); a configuration file's routes cannot have it
    /// (an upstream has no extensions).
    ResponseExtension,
}

impl CostFrom {
    /// Parses a `cost_from` value; the error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "response-bytes" => return Ok(CostFrom::ResponseBytes),
            "response-extension" => return Ok(CostFrom::ResponseExtension),
            _ => {}
        }
        if let Some(pointer) = text.strip_prefix("response-json:") {
            return json_pointer(pointer).map(|()| CostFrom::ResponseJson(pointer.to_owned()));
        }
        let Some(name) = text.strip_prefix("response-header:") else {
            return Err(format!(
                "unknown cost source `{text}`: `response-header:NAME` settles the request's cost to the whole \
                 number in the response header NAME, `response-json:/POINTER` to the whole number at that JSON \
                 pointer of the response body (or of a server-sent-event stream's last event that has it), \
                 `response-bytes` to the body bytes sent"
            ));
        };
        // A field name is an RFC 9110 token.
        let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if name.is_empty() || !name.bytes().all(tchar) {
            return Err(format!("`{name}` is not a header name"));
        }
        Ok(CostFrom::ResponseHeader(name.to_ascii_lowercase()))
    }

    /// True when the cost is known only once the response's body has been sent.
    pub fn reads_body(&self) -> bool {
        matches!(self, CostFrom::ResponseJson(_) | CostFrom::ResponseBytes)
    }
}

/// Checks an RFC 6901 pointer below the document's root: `/` then reference tokens, `~` only
/// as `~0` or `~1`.
fn json_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.starts_with('/') {
        return Err(format!(
            "`{pointer}` is not a JSON pointer to a field: it starts with `/` (e.g. `/usage/total_tokens`)"
        ));
    }
    let mut rest = pointer;
    while let Some(at) = rest.find('~') {
        rest = &rest[at + 1..];
        if !(rest.starts_with('0') || rest.starts_with('1')) {
            return Err(format!("`{pointer}`: in a JSON pointer `~` is written `~0` and `/` inside a name `~1`"));
        }
    }
    Ok(())
}

impl fmt::Display for CostFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CostFrom::ResponseHeader(name) => write!(f, "response-header:{name}"),
            CostFrom::ResponseJson(pointer) => write!(f, "response-json:{pointer}"),
            CostFrom::ResponseBytes => f.write_str("response-bytes"),
            CostFrom::ResponseExtension => f.write_str("response-extension"),
        }
    }
}
