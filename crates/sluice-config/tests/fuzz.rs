//! The configuration file crosses a trust boundary too (an operator's typo, a generated file):
//! whatever it holds, parsing answers a configuration or an error that names a line of the file
//! and a field, never a panic.

use proptest::prelude::*;
use sluice_core::fuzz_cases;

const EXAMPLE: &str = include_str!("../../../examples/gateway.toml");

/// Text made of the pieces TOML configurations are made of.
fn tomlish() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("[server]\n"),
        Just("[[policy]]\n"),
        Just("[[route]]\n"),
        Just("[store]\n"),
        Just("[decision_api]\n"),
        Just("name = \"p\"\n"),
        Just("algorithm = \"token-bucket\"\n"),
        Just("algorithm = \"sliding-log\"\n"),
        Just("capacity = 0\n"),
        Just("capacity = 18446744073709551615\n"),
        Just("refill_per_second = 1e308\n"),
        Just("refill_per_second = -0.0\n"),
        Just("limit = 3\n"),
        Just("window = \"1.5s\"\n"),
        Just("window = \"0s\"\n"),
        Just("path = \"/api/*\"\n"),
        Just("path = \"/a%2F\"\n"),
        Just("limits = [{ policy = \"p\", key = \"ip\" }]\n"),
        Just("limits = [{ policy = \"p\", key = \"email(json:/e)|ip\" }]\n"),
        Just("key = []\n"),
        Just("cost = 0\n"),
        Just("kind = \"redis\"\n"),
        Just("url = \"redis://:x@h\"\n"),
        Just("on_error = \"local\"\n"),
        Just("key_secret = \"0123456789abcdef0123\"\n"),
        Just("key_secret_file = \"/nonexistent\"\n"),
        Just("trusted_proxies = [\"::/0\"]\n"),
        Just("ipv6_prefix = 200\n"),
        Just("[rls]\n"),
        Just("descriptors = \"ratelimit\"\n"),
        Just("watch_interval = \"0s\"\n"),
        Just("watch_interval = \"1ms\"\n"),
        Just("watch_interval = \"2s\"\n"),
        Just("charge = \"independent\"\n"),
        Just("=\n"),
        Just("\"\n"),
        Just("[\n"),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|p| p.concat())
}

fn check(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = sluice_config::parse("fuzz.toml", text) {
        let lines = text.lines().count().max(1);
        prop_assert!(e.line.is_none_or(|l| l >= 1 && l <= lines + 1), "line {:?} of {lines}: {e}", e.line);
        prop_assert!(!e.field.is_empty() && !e.message.is_empty(), "{e}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(fuzz_cases(3000)))]

    #[test]
    fn configuration_like_text_is_read_or_refused_with_a_line(text in tomlish()) {
        check(&text)?;
    }

    #[test]
    fn arbitrary_text_is_read_or_refused_with_a_line(text in "\\PC{0,300}") {
        check(&text)?;
    }

    /// The documented example with one byte changed, inserted or removed.
    #[test]
    fn a_mangled_example_is_read_or_refused_with_a_line(at in 0usize..EXAMPLE.len(), byte in any::<u8>(), how in 0u8..3) {
        let mut bytes = EXAMPLE.as_bytes().to_vec();
        match how {
            0 => bytes[at] = byte,
            1 => bytes.insert(at, byte),
            _ => { bytes.remove(at); }
        }
        if let Ok(text) = String::from_utf8(bytes) {
            check(&text)?;
        }
    }
}
