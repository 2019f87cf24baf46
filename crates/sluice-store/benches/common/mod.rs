//! What the store's benchmarks share.

use criterion::Criterion;

/// A benchmark's `main`: criterion's `groups`, then, only under `cargo bench` (a test run,
/// `cargo test --benches`, just checks that each runs), the `summary` of timed rounds.
pub fn run(groups: fn(&mut Criterion), summary: fn()) {
    let mut criterion = Criterion::default().configure_from_args();
    groups(&mut criterion);
    criterion.final_summary();
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}

/// The median of a few values.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
