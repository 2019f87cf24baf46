//! Arbitrary input never panics the loader, nor arbitrary request descriptors the matching.

use proptest::prelude::*;
use sluice_rls::parse_file;

const CONFIG: &str = "domain: d
descriptors:
  - key: a
    value: x*y*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
    descriptors:
      - key: b
        value: '*'
        rate_limit: {unit: hour, requests_per_unit: 2}
      - key: b
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 3}
  - key: é
    value: ü*
    value_to_metric: true
    descriptors:
      - key: c
        rate_limit: {unlimited: true}
";

/// YAML-ish text: the format's own words, punctuation and indentation, shuffled.
fn yamlish() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("domain: ".to_string()),
        Just("descriptors:".to_string()),
        Just("  - key: ".to_string()),
        Just("    value: ".to_string()),
        Just("    rate_limit:".to_string()),
        Just("      unit: second".to_string()),
        Just("      requests_per_unit: ".to_string()),
        Just("unlimited: true".to_string()),
        Just("replaces:\n - name: a".to_string()),
        Just("&a ".to_string()),
        Just("*a".to_string()),
        Just("[".to_string()),
        Just("{".to_string()),
        Just("\n".to_string()),
        Just("    ".to_string()),
        "[a-z*_0-9 :\\-\"'#!|>%@`]{0,12}",
    ];
    prop::collection::vec(token, 0..40).prop_map(|t| t.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: sluice_core::fuzz_cases(512), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_loader_never_panics_on_yamlish_text(text in yamlish()) {
        let _ = parse_file("fuzz.yaml", &text);
    }

    #[test]
    fn the_loader_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = parse_file("fuzz.yaml", &text);
    }

    #[test]
    fn matching_never_panics_and_only_matches_at_depth(
        entries in prop::collection::vec(("[abcé]{0,2}", "[xyü*]{0,4}"), 0..5),
        domain in prop_oneof![Just("d".to_string()), "[a-z]{0,2}"],
    ) {
        let d = parse_file("c.yaml", CONFIG).unwrap();
        let e: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        if let Some(m) = d.lookup(&domain, &e) {
            prop_assert_eq!(m.values.len(), e.len());
            prop_assert!(!e.is_empty() && e.len() <= 2);
        }
    }
}
