//! When a snapshot was written, in terms a later process can compare: the store's clock, the
//! wall clock and, where the system has it, the time since boot.
//!
//! States hold times of the store's clock, which a new process reads afresh. What carries over
//! is the wall clock; the time since boot (Linux: `/proc/uptime`, under the boot named by
//! `/proc/sys/kernel/random/boot_id`) checks it when both readings come from one boot, so a
//! wall clock stepped forward between the two runs does not age states by the step. Every doubt
//! is settled on the short side: a restart never ages a state by more time than surely passed.

use std::time::{SystemTime, UNIX_EPOCH};

use sluice_core::{Clock, NANOS_PER_MILLI, Nanos};

/// The time since boot as the system reports it, to [`UPTIME_RESOLUTION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boot {
    /// Which boot: equal ids mean the two uptimes count from one start.
    pub id: [u8; 16],
    /// Nanoseconds since that boot (suspended time included).
    pub uptime: Nanos,
}

/// The resolution of `/proc/uptime` (hundredths of a second): the most a difference of two
/// readings can overstate the time between them.
pub const UPTIME_RESOLUTION: Nanos = 10 * NANOS_PER_MILLI;

/// The clocks at one moment.
///
/// ```
/// use sluice_core::NANOS_PER_SEC as S;
/// use sluice_store::Moment;
/// let written = Moment { clock: 50 * S, wall: 1_000 * S, boot: None };
/// // 30 s of wall time later, in a process whose clock reads 7 s.
/// assert_eq!(Moment { clock: 7 * S, wall: 1_030 * S, boot: None }.elapsed_since(&written), 30 * S);
/// // A wall clock that went backwards proves nothing passed.
/// assert_eq!(Moment { clock: 7 * S, wall: 990 * S, boot: None }.elapsed_since(&written), 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moment {
    /// The store's clock: the frame every state's times are in.
    pub clock: Nanos,
    /// Wall-clock nanoseconds since the Unix epoch: what a later process can compare.
    pub wall: Nanos,
    /// The time since boot, where the system tells it: bounds the wall clock's say.
    pub boot: Option<Boot>,
}

impl Moment {
    /// The clocks now, `clock` being the store's.
    pub fn now(clock: &dyn Clock) -> Self {
        let boot = Boot::read();
        let wall =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Self { clock: clock.now(), wall, boot }
    }

    /// The time that surely passed since `earlier`: the wall clock's difference (0 if it went
    /// backwards), no more than the time since boot says when both moments are of one boot
    /// (less its resolution).
    pub fn elapsed_since(&self, earlier: &Moment) -> Nanos {
        let wall = self.wall.saturating_sub(earlier.wall);
        match (self.boot, earlier.boot) {
            (Some(now), Some(then)) if now.id == then.id => {
                wall.min(now.uptime.saturating_sub(then.uptime).saturating_sub(UPTIME_RESOLUTION))
            }
            _ => wall,
        }
    }
}

impl Boot {
    /// This boot and the time since it, or `None` where the system does not say.
    pub fn read() -> Option<Self> {
        #[cfg(target_os = "linux")]
        {
            let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
            let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
            Some(Self { id: parse_boot_id(&id)?, uptime: parse_uptime(&uptime)? })
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }
}

/// The 16 bytes of a boot id written as a UUID.
fn parse_boot_id(text: &str) -> Option<[u8; 16]> {
    let hex: Vec<u8> = text.trim().bytes().filter(|&b| b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        id[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(id)
}

/// The first field of `/proc/uptime` (seconds with a fraction) in nanoseconds.
fn parse_uptime(text: &str) -> Option<Nanos> {
    let first = text.split_whitespace().next()?;
    let (secs, frac) = first.split_once('.').unwrap_or((first, ""));
    let secs: u64 = secs.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_nanos = if frac.is_empty() { 0 } else { frac.parse::<u64>().ok()? * 10u64.pow(9 - frac.len() as u32) };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    #[test]
    fn uptime_and_boot_id_parse() {
        assert_eq!(parse_uptime("350735.47 234388.90\n"), Some(350_735 * S + 470_000_000));
        assert_eq!(parse_uptime("12 3"), Some(12 * S));
        assert_eq!(parse_uptime("x 3"), None);
        assert_eq!(parse_uptime("1.2x 3"), None);
        let id = parse_boot_id("6f4c2b3a-1d2e-4f50-8a9b-0c1d2e3f4a5b\n").unwrap();
        assert_eq!(id[0], 0x6f);
        assert_eq!(id[15], 0x5b);
        assert_eq!(parse_boot_id("6f4c"), None);
    }

    #[test]
    fn the_boot_clock_caps_a_wall_clock_stepped_forward() {
        let boot = |uptime| Some(Boot { id: [1; 16], uptime });
        let then = Moment { clock: 0, wall: 1_000 * S, boot: boot(100 * S) };
        // The wall clock says an hour, the boot clock 5 s: 5 s less its resolution.
        let now = Moment { clock: 0, wall: 4_600 * S, boot: boot(105 * S) };
        assert_eq!(now.elapsed_since(&then), 5 * S - UPTIME_RESOLUTION);
        // The wall clock says less than the boot clock: the wall clock.
        let now = Moment { clock: 0, wall: 1_002 * S, boot: boot(105 * S) };
        assert_eq!(now.elapsed_since(&then), 2 * S);
        // Another boot: the boot clock says nothing.
        let other = Moment { clock: 0, wall: 1_030 * S, boot: Some(Boot { id: [2; 16], uptime: S }) };
        assert_eq!(other.elapsed_since(&then), 30 * S);
    }

    #[test]
    fn this_system_reads_a_moment() {
        let clock = sluice_core::ManualClock::new(42);
        let m = Moment::now(&clock);
        assert_eq!(m.clock, 42);
        assert!(m.wall > 1_600_000_000 * S, "a wall clock after 2020");
        #[cfg(target_os = "linux")]
        assert!(m.boot.is_some(), "Linux tells the time since boot");
    }
}
