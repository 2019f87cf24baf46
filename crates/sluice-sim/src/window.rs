//! Counting admitted requests over a sliding interval.

use sluice_core::Nanos;

/// The most of `times` (sorted) that fall in any half-open interval `[t, t + window)`: for each
/// time, the number of times in the `window` that ends with it. Exact, in one pass with two
/// pointers.
///
/// ```
/// use sluice_sim::max_in_window;
/// // 3 within 1 s (0.9, 1.0, 1.8), but 2.0 is a full second after 1.0.
/// let t = [900, 1_000, 1_800, 2_000];
/// assert_eq!(max_in_window(&t, 1_000), 3);
/// ```
pub fn max_in_window(times: &[Nanos], window: Nanos) -> u64 {
    if window == 0 {
        return 0;
    }
    let mut best = 0;
    let mut start = 0;
    for (end, &t) in times.iter().enumerate() {
        // Unsorted input gives a meaningless answer, never a panic: start never passes end.
        while t.saturating_sub(times[start]) >= window {
            start += 1;
        }
        best = best.max(end + 1 - start);
    }
    best as u64
}

/// For plotting: the highest count of `times` (sorted) in the window `(t - window, t]`, for `t`
/// in each of `cells` equal cells that divide `[0, span)`. Exact: the count only changes at an
/// admitted time (up) or one window after it (down), and each such instant lies in one cell.
pub fn sliding_envelope(times: &[Nanos], window: Nanos, span: Nanos, cells: usize) -> Vec<u64> {
    let mut out = vec![0u64; cells];
    if cells == 0 || span == 0 {
        return out;
    }
    let cell_of = |t: Nanos| ((t as u128 * cells as u128 / span as u128) as usize).min(cells - 1);
    let (mut rise, mut fall) = (0, 0);
    let (mut cell, mut count) = (0usize, 0u64);
    loop {
        // The next instant at which the count changes: an admitted time, or one window after one.
        let next_rise = times.get(rise).copied();
        let next_fall = times.get(fall).map(|t| t.saturating_add(window));
        let t = match (next_rise, next_fall) {
            (Some(r), Some(f)) => r.min(f),
            (None, Some(f)) => f,
            _ => break,
        };
        if t >= span {
            break;
        }
        let c = cell_of(t);
        if c > cell {
            // The count held since the last change covers the cells up to `t`, and the start of
            // `t`'s own cell unless `t` is exactly where that cell starts.
            for x in &mut out[cell + 1..c] {
                *x = (*x).max(count);
            }
            if t > 0 && cell_of(t - 1) == c {
                out[c] = out[c].max(count);
            }
            cell = c;
        }
        // Every change at this instant at once: (t - window, t] holds t and drops t - window.
        while rise < times.len() && times[rise] == t {
            count += 1;
            rise += 1;
        }
        while fall < times.len() && times[fall].saturating_add(window) == t {
            count = count.saturating_sub(1);
            fall += 1;
        }
        out[c] = out[c].max(count);
    }
    for x in &mut out[cell + 1..] {
        *x = (*x).max(count);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brute_max(times: &[Nanos], window: Nanos) -> u64 {
        times.iter().map(|&s| times.iter().filter(|&&t| t >= s && t - s < window).count() as u64).max().unwrap_or(0)
    }

    #[test]
    fn edges_are_half_open() {
        assert_eq!(max_in_window(&[], 10), 0);
        assert_eq!(max_in_window(&[5], 10), 1);
        assert_eq!(max_in_window(&[0, 10], 10), 1);
        assert_eq!(max_in_window(&[0, 9], 10), 2);
        assert_eq!(max_in_window(&[3, 3, 3], 1), 3);
        assert_eq!(max_in_window(&[3, 3, 3], 0), 0);
    }

    #[test]
    fn envelope_of_a_simple_run() {
        // Admitted at 0, 1, 2 (window 2, span 6, one cell per unit): counts 1, 2, 2, 1, 0, 0.
        assert_eq!(sliding_envelope(&[0, 1, 2], 2, 6, 6), [1, 2, 2, 1, 0, 0]);
        assert_eq!(sliding_envelope(&[], 2, 6, 3), [0, 0, 0]);
    }

    proptest! {
        #[test]
        fn two_pointers_agree_with_brute_force(mut times in proptest::collection::vec(0u64..1_000, 0..60),
                                               window in 1u64..300) {
            times.sort_unstable();
            prop_assert_eq!(max_in_window(&times, window), brute_max(&times, window));
        }

        #[test]
        fn envelope_is_the_cellwise_maximum(mut times in proptest::collection::vec(0u64..120, 0..40),
                                            window in 1u64..40, cells in 1usize..30) {
            times.sort_unstable();
            let span = 120;
            let env = sliding_envelope(&times, window, span, cells);
            // Brute force: the count at every integer instant, maximised per cell.
            let mut want = vec![0u64; cells];
            for t in 0..span {
                let n = times.iter().filter(|&&a| a <= t && a + window > t).count() as u64;
                let c = ((t as u128 * cells as u128 / span as u128) as usize).min(cells - 1);
                want[c] = want[c].max(n);
            }
            prop_assert_eq!(env, want);
        }
    }
}
