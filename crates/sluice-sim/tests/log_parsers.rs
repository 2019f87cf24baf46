//! The access-log readers on hostile input: arbitrary bytes, and valid lines cut, spliced and
//! mangled, never panic, and what they accept is well formed.

use proptest::prelude::*;
use sluice_sim::{CombinedFormat, JsonFields, LogRequest, LogSource};

const COMBINED: &str = r#"203.0.113.7 - frank [10/Oct/2000:13:55:36 -0700] "GET /a/b?c=d HTTP/1.1" 200 2326 "http://x/\"q\"" "Mozilla/5.0 \x22x\x22" "10.0.0.1, 198.51.100.2""#;
const JSON: &str = r#"{"time":"2000-10-10T13:55:36.5-07:00","remote_addr":"[2001:db8::1]:443","request_method":"GET","request_uri":"/a?b","http_user_agent":"ua \"x\" \u00e9","nested":{"a":[1,{"b":null}],"c":{"b":"x"}},"http_x_forwarded_for":["1.2.3.4","5.6.7.8"],"body_bytes_sent":"2326","request_time":0.153}"#;

/// A valid line with some bytes replaced, some removed and some inserted.
fn mangled(base: &'static str) -> impl Strategy<Value = Vec<u8>> {
    let edits = proptest::collection::vec((0usize..400, 0u8..3, any::<u8>()), 0..6);
    (edits, 0usize..400).prop_map(move |(edits, cut)| {
        let mut b = base.as_bytes().to_vec();
        for (at, kind, byte) in edits {
            let at = at % (b.len() + 1);
            match kind {
                0 if at < b.len() => b[at] = byte,
                1 if at < b.len() => {
                    b.remove(at);
                }
                _ => b.insert(at, byte),
            }
        }
        b.truncate(cut.max(1).min(b.len()));
        b
    })
}

/// What a parser accepted must hold together: a method token, a path without a query.
fn well_formed(r: &LogRequest) -> Result<(), TestCaseError> {
    prop_assert!(!r.method().is_empty());
    prop_assert!(!r.path().contains('?'));
    prop_assert!(r.headers().all(|(_, v)| !v.is_empty() && v != b"-"));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(4000)))]

    #[test]
    fn combined_lines_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut r = LogRequest::default();
        for format in [CombinedFormat::default(), CombinedFormat { forwarded_last: true }] {
            if format.parse(&bytes, &mut r).is_ok() {
                well_formed(&r)?;
            }
        }
    }

    #[test]
    fn mangled_combined_lines_never_panic(bytes in mangled(COMBINED)) {
        let mut r = LogRequest::default();
        if (CombinedFormat { forwarded_last: true }).parse(&bytes, &mut r).is_ok() {
            well_formed(&r)?;
        }
    }

    #[test]
    fn json_lines_never_panic(text in "[ -~\u{e9}]{0,200}") {
        let mut r = LogRequest::default();
        if JsonFields::default().parse(text.as_bytes(), &mut r).is_ok() {
            well_formed(&r)?;
        }
    }

    #[test]
    fn mangled_json_lines_never_panic(bytes in mangled(JSON), nested in any::<bool>()) {
        let fields: JsonFields = if nested {
            "time=time,ip=remote_addr,header:x-a=nested.a,header:x-b=nested.c.b".parse().unwrap()
        } else {
            JsonFields::default()
        };
        let mut r = LogRequest::default();
        if fields.parse(&bytes, &mut r).is_ok() {
            well_formed(&r)?;
        }
    }

    #[test]
    fn arbitrary_streams_read_line_by_line(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let newlines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        let mut source = LogSource::from_reader(std::io::Cursor::new(bytes.clone()), None).unwrap();
        let mut n = 0;
        while let Some(line) = source.next_line().unwrap_or(None) {
            n += 1;
            prop_assert_eq!(line.number, n);
        }
        let unterminated = u64::from(!bytes.is_empty() && bytes.last() != Some(&b'\n'));
        // Input that starts like gzip is decompressed (and fails), anything else is read as lines.
        if !bytes.starts_with(&[0x1f, 0x8b]) {
            prop_assert_eq!(n, newlines + unterminated);
        }
    }
}

#[test]
fn the_bases_are_valid_lines() {
    let mut r = LogRequest::default();
    CombinedFormat { forwarded_last: true }.parse(COMBINED.as_bytes(), &mut r).unwrap();
    assert_eq!((r.method(), r.path()), ("GET", "/a/b"));
    assert_eq!(r.headers().count(), 3);
    JsonFields::default().parse(JSON.as_bytes(), &mut r).unwrap();
    assert_eq!(r.peer.to_string(), "2001:db8::1");
    assert_eq!(r.headers().count(), 2);
    assert_eq!((r.sent, r.took), (Some(2326), Some(153_000_000)), "the size and the time in flight");
}
