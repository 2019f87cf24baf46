//! The head of a request to the upstream, written as HTTP/1.1 bytes.

use http::request::Parts;

/// Writes the head of a request without a body: `METHOD target HTTP/1.1`, each field, the blank
/// line. The parts come from a parsed request, so the method is a token, the target holds no
/// space or line break, and no name or value holds a line break (`http` refuses them): nothing a
/// client sent can add a line of its own.
///
/// The target is written as `parts.uri` holds it: the proxy has put it in origin form already.
///
/// ```
/// let req = http::Request::get("/a?b=1").header("host", "up").header("x-two", "2").body(()).unwrap();
/// let (parts, ()) = req.into_parts();
/// let mut out = Vec::new();
/// sluice_gateway::h1::request_head::write(&parts, &mut out);
/// assert_eq!(out, b"GET /a?b=1 HTTP/1.1\r\nhost: up\r\nx-two: 2\r\n\r\n");
/// ```
pub fn write(parts: &Parts, out: &mut Vec<u8>) {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let fields: usize = parts.headers.iter().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    out.reserve(parts.method.as_str().len() + target.len() + fields + 13);
    out.extend_from_slice(parts.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_fields_are_written_one_line_each_in_order() {
        let req = http::Request::delete("/x")
            .header("cookie", "a=1")
            .header("cookie", "b=2")
            .header("host", "h")
            .body(())
            .unwrap();
        let (parts, ()) = req.into_parts();
        let mut out = b"left over ".to_vec();
        write(&parts, &mut out);
        assert_eq!(out, b"left over DELETE /x HTTP/1.1\r\ncookie: a=1\r\ncookie: b=2\r\nhost: h\r\n\r\n");
    }

    #[test]
    fn no_value_a_request_can_hold_breaks_a_line() {
        // What `http` refuses never reaches the writer; what it accepts is written as one line.
        assert!(http::HeaderValue::from_bytes(b"a\r\nx-injected: 1").is_err());
        assert!(http::HeaderValue::from_bytes(b"a\nb").is_err());
        assert!("/a\r\nb".parse::<http::Uri>().is_err());
        let req = http::Request::get("/").header("x-v", http::HeaderValue::from_bytes(b"tab\there \xff").unwrap());
        let (parts, ()) = req.body(()).unwrap().into_parts();
        let mut out = Vec::new();
        write(&parts, &mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 3, "request line, one field, blank line");
    }
}
