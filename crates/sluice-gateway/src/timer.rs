//! Timers kept for reuse: one connection's timeouts, one request after the other, on one tokio
//! timer entry.
//!
//! A new tokio `Sleep` is registered in the runtime's timer wheel when first polled and taken out
//! again when dropped, each under the wheel's lock; and a deadline earlier than the driver's next
//! wake-up writes to its wake-up pipe, a system call. A connection's header read timeout and a
//! proxied request's upstream timeout would do both for every request. A `Sleep` moved to a
//! later deadline instead only stores the new deadline (the wheel finds it when the old one
//! comes and files it again), so here each connection keeps its sleep and moves it on (an
//! upstream connection does the same with its own sleep, in `sluice-upstream`'s pool).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::time::Sleep;

/// A sleep put aside for the next deadline of the same owner.
#[derive(Debug, Default)]
pub struct SleepSlot(Mutex<Option<Pin<Box<Sleep>>>>);

impl SleepSlot {
    /// A sleep until `deadline`: the one put aside, moved on, or a new one.
    pub fn until(&self, deadline: tokio::time::Instant) -> Pin<Box<Sleep>> {
        let spare = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        match spare {
            Some(mut sleep) => {
                sleep.as_mut().reset(deadline);
                sleep
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        }
    }

    /// Puts `sleep` aside for the next [`SleepSlot::until`].
    pub fn put(&self, sleep: Pin<Box<Sleep>>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(sleep);
    }
}

/// hyper's timer for one server connection: its header read timeout, started for every request,
/// runs on one sleep (see the [module](self)).
#[derive(Debug, Clone, Default)]
pub struct ConnTimer {
    /// The sleep of the timeout that ended last.
    slot: Arc<SleepSlot>,
}

/// A sleep lent to hyper; it goes back to its connection's slot when hyper drops it.
struct Lent {
    /// Always `Some` until dropped.
    sleep: Option<Pin<Box<Sleep>>>,
    /// Where it goes back.
    slot: Arc<SleepSlot>,
}

impl Future for Lent {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.sleep.as_mut() {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Ready(()),
        }
    }
}

impl hyper::rt::Sleep for Lent {}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(sleep) = self.sleep.take() {
            self.slot.put(sleep);
        }
    }
}

impl ConnTimer {
    fn lend(&self, deadline: tokio::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(Lent { sleep: Some(self.slot.until(deadline)), slot: self.slot.clone() })
    }
}

impl hyper::rt::Timer for ConnTimer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.lend(tokio::time::Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.lend(deadline.into())
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<Lent>() {
            Some(mut lent) => {
                if let Some(s) = lent.sleep.as_mut() {
                    s.as_mut().reset(new_deadline.into());
                }
            }
            None => *sleep = self.sleep_until(new_deadline),
        }
    }

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Timer;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_lent_sleep_comes_back_and_keeps_time() {
        let timer = ConnTimer::default();
        let start = tokio::time::Instant::now();
        let first = timer.sleep(Duration::from_secs(10));
        drop(first);
        assert!(timer.slot.0.lock().unwrap().is_some(), "given back when dropped");
        let second = timer.sleep_until((start + Duration::from_secs(3)).into());
        assert!(timer.slot.0.lock().unwrap().is_none(), "the spare one is lent again");
        second.await;
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(3));
        // Moved on to a later deadline than the one it was registered with: still on time.
        let mut third = timer.sleep(Duration::from_secs(60));
        timer.reset(&mut third, (start + Duration::from_secs(90)).into());
        third.await;
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(90));
    }
}
