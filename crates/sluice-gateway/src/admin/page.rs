//! The status page: one HTML file, its script and its style sheet, compiled into the binary and
//! served with headers that forbid everything they do not need.

use http::Response;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};

use crate::respond::{self, Body};

/// The page's policy: its own script, style sheet and `status.json`, nothing else — no inline
/// code, no other origin, no frames, no forms, no plugins.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const HTML: &str = include_str!("status.html");
const SCRIPT: &str = include_str!("status.js");
const STYLE: &str = include_str!("status.css");

/// `path` (`/`, `/status.js` or `/status.css`) with its content type.
pub(super) fn asset(path: &str) -> Response<Body> {
    let (body, content_type) = match path {
        "/status.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/status.css" => (STYLE, "text/css; charset=utf-8"),
        _ => (HTML, "text/html; charset=utf-8"),
    };
    let mut res = Response::new(respond::full(body.into()));
    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    res
}

/// Adds the headers every admin answer carries: the content security policy, no sniffing of
/// content types, no framing, no referrer.
pub(super) fn harden(headers: &mut HeaderMap) {
    let set = |h: &mut HeaderMap, name: &'static str, value: &'static str| {
        h.insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CONTENT_SECURITY_POLICY);
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "x-frame-options", "DENY");
    set(headers, "referrer-policy", "no-referrer");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_its_own_files_and_holds_no_inline_code() {
        assert!(HTML.contains(r#"<script src="status.js" defer></script>"#));
        assert!(HTML.contains(r#"<link rel="stylesheet" href="status.css">"#));
        // Inline scripts, handlers and styles would be refused by the policy anyway.
        for inline in ["<script>", " onclick=", " onload=", " style=", "<style", "http://", "https://"] {
            assert!(!HTML.contains(inline), "status.html holds {inline:?}");
        }
        // The script builds the page from text nodes only: nothing it reads becomes markup.
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("] {
            assert!(!SCRIPT.contains(sink), "status.js uses {sink}");
        }
        assert!(!SCRIPT.contains("http://") && !SCRIPT.contains("https://"), "the script reaches no other origin");
    }
}
