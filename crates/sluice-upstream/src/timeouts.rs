//! How long a request to the upstream may wait, at each of its three stages.

use std::time::Duration;

/// The waits of one request to the upstream. Each is a bound on a wait, not on the whole
/// exchange: a response body that streams for an hour, never silent for `idle`, is not cut.
///
/// ```
/// use std::time::Duration;
/// use sluice_upstream::timeouts::Timeouts;
/// let t = Timeouts::from(Duration::from_secs(30));
/// assert_eq!((t.connect, t.first_byte, t.idle), (t.idle, t.idle, Duration::from_secs(30)));
/// let t = Timeouts { connect: Duration::from_secs(1), ..t };
/// assert!(t.connect < t.first_byte);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Opening a connection (TCP, and TLS's handshake on `https://`). Past it nothing of the
    /// request was sent: the request fails as a connect error, and may go to another target.
    pub connect: Duration,
    /// From the request's sending to its response head, connecting included. Past it the
    /// request fails as a timeout (the gateway answers 504).
    pub first_byte: Duration,
    /// The longest a response body may wait for its next bytes. Past it the body fails (the
    /// client's connection is cut; the upstream's closed).
    pub idle: Duration,
}

impl From<Duration> for Timeouts {
    /// Every stage bounded by the same `d` (what `[upstream] timeout_ms` alone says).
    fn from(d: Duration) -> Self {
        Self { connect: d, first_byte: d, idle: d }
    }
}
