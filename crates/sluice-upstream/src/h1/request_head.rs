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
/// sluice_upstream::h1::request_head::write(&parts, &mut out);
/// assert_eq!(out, b"GET /a?b=1 HTTP/1.1\r\nhost: up\r\nx-two: 2\r\n\r\n");
/// ```
pub fn write(parts: &Parts, out: &mut Vec<u8>) {
    // No reserve pass over the fields: a connection keeps its buffer, so after its first
    // request the head fits without growing it.
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
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

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(2000)))]

        /// Whatever a client's request held that `http` accepted, the head written for the
        /// upstream parses back as exactly that request, and as one request: nothing is left
        /// over that an upstream could read as a second one.
        #[test]
        fn the_head_reads_back_as_the_one_request_it_came_from(
            method in "[A-Za-z!#$%&'*+.^_`|~-]{1,12}",
            target in "/[!-~]{0,40}",
            fields in proptest::collection::vec(("[a-zA-Z0-9!#$%&'*+.^_`|~-]{1,20}", proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40)), 0..12),
        ) {
            let Ok(method) = http::Method::from_bytes(method.as_bytes()) else { return Ok(()) };
            let Ok(uri) = target.parse::<http::Uri>() else { return Ok(()) };
            let mut req = http::Request::builder().method(method.clone()).uri(uri.clone());
            let mut kept = Vec::new();
            for (name, value) in &fields {
                // Only what `http` accepts reaches the writer, as from a parsed request.
                let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(name.as_bytes()), http::HeaderValue::from_bytes(value)) else { continue };
                kept.push((name.clone(), value.clone()));
                req = req.header(name, value);
            }
            let (parts, ()) = req.body(()).unwrap().into_parts();
            let mut out = Vec::new();
            write(&parts, &mut out);
            let mut seen = [httparse::EMPTY_HEADER; 16];
            let mut parsed = httparse::Request::new(&mut seen);
            let status = parsed.parse(&out);
            proptest::prop_assert_eq!(status, Ok(httparse::Status::Complete(out.len())), "{:?}", String::from_utf8_lossy(&out));
            proptest::prop_assert_eq!(parsed.method, Some(method.as_str()));
            proptest::prop_assert_eq!(parsed.path, uri.path_and_query().map(|p| p.as_str()));
            // In the map's order (by name, repeated ones together), each value whole; httparse
            // trims the spaces around a value, as every HTTP/1.1 reader does.
            let want: Vec<(String, Vec<u8>)> = parts.headers.iter().map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().trim_ascii().to_vec())).collect();
            let got: Vec<(String, Vec<u8>)> = parsed.headers.iter().map(|h| (h.name.to_owned(), h.value.to_vec())).collect();
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert_eq!(parts.headers.len(), kept.len());
        }
    }
}
