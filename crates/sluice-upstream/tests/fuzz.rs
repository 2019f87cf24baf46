//! Bytes from the network through the whole exchange (response head, framing, body): any bytes,
//! split anywhere, never panic; a response split anywhere reads as it reads unsplit. Run with
//! many cases by scripts/fuzz.

mod common;

use common::{Scripted, Step, paused, response, script, through_sluice};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(2000)))]

    /// Any bytes, in any pieces, ending in a close or a reset: a response or an error, never a
    /// panic, and never more body than bytes came.
    #[test]
    fn any_bytes_from_an_upstream_are_read_or_refused(
        wire in proptest::collection::vec(any::<u8>(), 0..600),
        cuts in proptest::collection::vec(0..600usize, 0..8),
        head_request: bool,
        reset: bool,
    ) {
        let mut socket = script(&wire, &cuts);
        if reset {
            socket = Scripted::new(vec![Step::Await(1), Step::Read(wire.clone()), Step::Reset]);
        }
        let method = if head_request { "HEAD" } else { "GET" };
        if let Ok(got) = paused(through_sluice(method, socket)) {
            prop_assert!(got.body.len() < wire.len());
        }
    }

    /// Responses of every framing (some wrong), split anywhere: what is read is what is read
    /// from the bytes in one piece, response or error.
    #[test]
    fn a_response_split_anywhere_reads_as_it_does_whole(
        (method, wire) in response(),
        cuts in proptest::collection::vec(0..400usize, 1..8),
    ) {
        let (split, unsplit) = paused(async { (through_sluice(&method, script(&wire, &cuts)).await, through_sluice(&method, script(&wire, &[])).await) });
        match (split, unsplit) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(_), Err(_)) => {}
            (a, b) => prop_assert!(false, "{:?}\n split: {a:?}\n whole: {b:?}", String::from_utf8_lossy(&wire)),
        }
    }
}
