//! The answer every algorithm gives.

use crate::time::Nanos;

/// What a limit says about one request.
///
/// A denial is a value, never an error; `retry_after` is only meaningful when `allowed` is false.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Whether the request is admitted (and, by `check`, charged).
    pub allowed: bool,
    /// The limit's size: requests per window, or the bucket's capacity.
    pub limit: u64,
    /// Requests of cost 1 that would still be admitted right now, after this one.
    pub remaining: u64,
    /// Time until the key is back to its fresh state if nothing else happens.
    pub reset_after: Nanos,
    /// When denied: the earliest time from now at which the same request would be admitted,
    /// if nothing else happens. Zero when admitted.
    pub retry_after: Nanos,
    /// Shaping only: how long to hold an admitted request before passing it on. Zero otherwise.
    pub delay: Nanos,
}

impl Decision {
    /// Of two decisions, the one closer to denying: a denial before an admission, then the
    /// longer `retry_after`, then the fewer `remaining`. Used to describe a request that several
    /// limits decide together.
    pub fn tighter(self, other: Decision) -> Decision {
        let key = |d: &Decision| (d.allowed, std::cmp::Reverse(d.retry_after), d.remaining);
        if key(&other) < key(&self) { other } else { self }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(allowed: bool, remaining: u64, retry_after: u64) -> Decision {
        Decision { allowed, limit: 10, remaining, reset_after: 0, retry_after, delay: 0 }
    }

    #[test]
    fn tighter_prefers_denial_then_longer_wait_then_fewer_remaining() {
        assert_eq!(d(true, 5, 0).tighter(d(false, 0, 3)), d(false, 0, 3));
        assert_eq!(d(false, 0, 9).tighter(d(false, 0, 3)), d(false, 0, 9));
        assert_eq!(d(true, 5, 0).tighter(d(true, 2, 0)), d(true, 2, 0));
        assert_eq!(d(true, 2, 0).tighter(d(true, 5, 0)), d(true, 2, 0));
    }
}
