//! A future raced against a sleep the caller keeps (and moves on for its next deadline: a
//! connection's sleep is registered with the runtime's timer once, not once per exchange).

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::time::Sleep;

/// Runs `fut` until `sleep` ends: `None` if it ends first.
pub async fn within<T>(sleep: &mut Pin<Box<Sleep>>, fut: impl Future<Output = T>) -> Option<T> {
    let mut fut = std::pin::pin!(fut);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        sleep.as_mut().poll(cx).map(|()| None)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn within_gives_up_when_the_sleep_ends() {
        let start = tokio::time::Instant::now();
        let mut sleep = Box::pin(tokio::time::sleep_until(start + Duration::from_secs(5)));
        assert_eq!(within(&mut sleep, async { 7 }).await, Some(7));
        assert_eq!(within(&mut sleep, std::future::pending::<()>()).await, None);
        assert_eq!(tokio::time::Instant::now() - start, Duration::from_secs(5));
    }
}
