//! How many cases a property-based fuzz test runs: its default in the test suite, or many more
//! under `scripts/fuzz` (which sets `SLUICE_FUZZ_CASES`).

/// `SLUICE_FUZZ_CASES` when set to a number, else `default`.
///
/// ```
/// // In a proptest block: #![proptest_config(ProptestConfig::with_cases(fuzz_cases(4000)))]
/// let cases = sluice_core::fuzz_cases(4000);
/// # let _ = cases;
/// ```
pub fn fuzz_cases(default: u32) -> u32 {
    std::env::var("SLUICE_FUZZ_CASES").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}
