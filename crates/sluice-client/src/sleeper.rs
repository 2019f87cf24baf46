//! Waiting between attempts, injectable so that tests and simulations need no real time.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_core::ManualClock;

/// A future that completes after a wait.
pub type SleepFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Something that can wait.
pub trait Sleeper: Send + Sync {
    /// A future that completes after `duration`.
    fn sleep(&self, duration: Duration) -> SleepFuture;
}

/// Real waiting on the tokio timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, duration: Duration) -> SleepFuture {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// Virtual waiting: moves a [`ManualClock`] forward by the wait at once and records it. Give the
/// same clock to the retrier and the wait is observed without sleeping.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use sluice_client::{ManualSleeper, Sleeper};
/// use sluice_core::{Clock, ManualClock};
///
/// let clock = Arc::new(ManualClock::new(0));
/// let sleeper = ManualSleeper::new(clock.clone());
/// drop(sleeper.sleep(Duration::from_secs(2)));
/// assert_eq!(clock.now(), 2_000_000_000);
/// assert_eq!(sleeper.waits(), [Duration::from_secs(2)]);
/// ```
#[derive(Debug)]
pub struct ManualSleeper {
    clock: Arc<ManualClock>,
    waits: Mutex<Vec<Duration>>,
}

impl ManualSleeper {
    /// A sleeper that advances `clock`.
    pub fn new(clock: Arc<ManualClock>) -> Self {
        Self { clock, waits: Mutex::new(Vec::new()) }
    }

    /// Every wait asked for so far, in order.
    pub fn waits(&self) -> Vec<Duration> {
        self.waits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Sleeper for ManualSleeper {
    fn sleep(&self, duration: Duration) -> SleepFuture {
        self.clock.advance(u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
        self.waits.lock().unwrap_or_else(|p| p.into_inner()).push(duration);
        Box::pin(std::future::ready(()))
    }
}
