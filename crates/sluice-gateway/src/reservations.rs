//! Reservations the decision API hands out (`POST /v1/reserve`) and takes back
//! (`/v1/settle`, `/v1/refund`): an admitted request's charges, held under an unguessable id
//! until the caller that made them says what the request really cost.
//!
//! A reservation is an attack surface: whoever holds its id could give a key's quota back. So
//! an id is 128 random bits (the thread's CSPRNG, reseeded from the OS); it is bound to who made
//! it (the bearer token, or the peer's address); it is used once (taken from the table when
//! settled or refunded); and it expires. A reservation never settled keeps its charge: the
//! strict direction, so a crashed caller never leaks capacity. The table belongs to one
//! configuration in force (a reload changes policy positions) and to one instance: its ids mean
//! nothing elsewhere, and a reload ends every open reservation, at its reserved cost.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sluice_store::Settle;

/// Who made a reservation: only they may settle or refund it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// A caller with the decision API's bearer token.
    Token,
    /// A caller allowed by its address.
    Peer(IpAddr),
}

/// Why a settlement or refund was refused: the `reason` of
/// `sluice_reservations_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// No open reservation of that id for this caller: never made, made by someone else, used
    /// already, expired, or not an id at all. One answer for all, so that none tells an
    /// attacker more than the others.
    Unknown,
    /// A refund of more than was charged.
    TooLarge,
}

impl Refused {
    /// The metric label.
    pub fn reason(self) -> &'static str {
        match self {
            Refused::Unknown => "unknown",
            Refused::TooLarge => "too_large",
        }
    }
}

/// An open reservation.
#[derive(Debug)]
struct Held {
    owner: Owner,
    /// The charges, each as a settlement at its reserved cost (`actual` = the check's cost).
    charges: Vec<Settle>,
    expires: Instant,
}

/// The open reservations of one configuration in force, bounded.
#[derive(Debug)]
pub struct Reservations {
    open: Mutex<HashMap<u128, Held>>,
    /// At most this many open at once; beyond, a reservation is refused (the request still
    /// charged: 503 tells the caller it holds no id).
    max: usize,
    /// How long a reservation stays open.
    ttl: Duration,
}

impl Reservations {
    /// A table of at most `max` open reservations, each open for `ttl`.
    pub fn new(max: usize, ttl: Duration) -> Self {
        Self { open: Mutex::new(HashMap::new()), max, ttl }
    }

    /// How long a reservation stays open.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u128, Held>> {
        // A map of plain values, whole between operations: a panic cannot leave it torn.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `charges` for `owner`: the id (32 lowercase hex digits), or `None` when the table
    /// is full of reservations still open.
    pub fn hold(&self, owner: Owner, charges: Vec<Settle>) -> Option<String> {
        let now = Instant::now();
        let mut open = self.table();
        if open.len() >= self.max {
            open.retain(|_, h| h.expires > now);
            if open.len() >= self.max {
                return None;
            }
        }
        let id = loop {
            let id: u128 = rand::random();
            if !open.contains_key(&id) {
                break id;
            }
        };
        open.insert(id, Held { owner, charges, expires: now + self.ttl });
        Some(format!("{id:032x}"))
    }

    /// Takes the reservation `id` of `owner`, checking it with `accept` (its charges) first: on
    /// `Err` the reservation stays open. Anyone else's, an expired or a used one is
    /// [`Refused::Unknown`].
    pub fn take(
        &self,
        id: &str,
        owner: Owner,
        accept: impl FnOnce(&[Settle]) -> Result<(), Refused>,
    ) -> Result<Vec<Settle>, Refused> {
        let id = parse_id(id).ok_or(Refused::Unknown)?;
        let mut open = self.table();
        let held = open.get(&id).filter(|h| h.owner == owner && h.expires > Instant::now()).ok_or(Refused::Unknown)?;
        accept(&held.charges)?;
        Ok(open.remove(&id).map(|h| h.charges).unwrap_or_default())
    }
}

/// An id as [`Reservations::hold`] writes it: exactly 32 lowercase hex digits.
fn parse_id(id: &str) -> Option<u128> {
    let ok = id.len() == 32 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    ok.then(|| u128::from_str_radix(id, 16).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use sluice_store::{Check, KeyHash};

    use super::*;

    fn charge() -> Vec<Settle> {
        vec![Settle { check: Check { policy: 0, key: KeyHash([1; 16]), cost: 3 }, charged_at: 7, actual: 3 }]
    }

    #[test]
    fn a_reservation_is_its_owners_once() {
        let r = Reservations::new(10, Duration::from_secs(60));
        let me = Owner::Peer("192.0.2.1".parse().unwrap());
        let id = r.hold(me, charge()).unwrap();
        assert_eq!(id.len(), 32);
        let ok = |_: &[Settle]| Ok(());
        assert_eq!(r.take(&id, Owner::Token, ok), Err(Refused::Unknown), "someone else's");
        assert_eq!(r.take(&id, Owner::Peer("192.0.2.2".parse().unwrap()), ok), Err(Refused::Unknown));
        assert_eq!(r.take(&id, me, |_| Err(Refused::TooLarge)), Err(Refused::TooLarge));
        assert_eq!(r.take(&id, me, ok), Ok(charge()), "still open after the refusals");
        assert_eq!(r.take(&id, me, ok), Err(Refused::Unknown), "used once");
        for bad in ["", "zz", &id.to_uppercase(), &format!("{id}0"), &format!("+{}", &id[1..])] {
            assert_eq!(r.take(bad, me, ok), Err(Refused::Unknown), "{bad}");
        }
    }

    #[test]
    fn a_full_table_makes_room_only_from_expired_reservations() {
        let r = Reservations::new(2, Duration::ZERO);
        let me = Owner::Token;
        let a = r.hold(me, charge()).unwrap();
        r.hold(me, charge()).unwrap();
        assert!(r.hold(me, charge()).is_some(), "expired ones make room");
        assert_eq!(r.take(&a, me, |_| Ok(())), Err(Refused::Unknown), "expired");
        let r = Reservations::new(1, Duration::from_secs(60));
        r.hold(me, charge()).unwrap();
        assert!(r.hold(me, charge()).is_none(), "full of open reservations");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(3000)))]

        /// An id is read only in the one form sluice writes (32 lower-case hex digits): upper
        /// case, signs, `0x`, spaces, other lengths and any other text are no id, never a panic.
        #[test]
        fn an_id_is_read_only_as_written(id: u128, other in ".{0,40}") {
            proptest::prop_assert_eq!(parse_id(&format!("{id:032x}")), Some(id));
            let written = other.len() == 32 && other.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            proptest::prop_assert_eq!(parse_id(&other).is_some(), written);
            let upper = format!("{id:032X}");
            proptest::prop_assert_eq!(parse_id(&upper).is_some(), !upper.bytes().any(|b| b.is_ascii_alphabetic()));
            proptest::prop_assert_eq!(parse_id(&format!("+{id:031x}")), None);
        }
    }
}
