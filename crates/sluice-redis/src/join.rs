//! Waiting for several futures at once, on the calling task (no spawning).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

/// Polls every future until all are done; the outputs come back in the input order.
pub(crate) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Option<Pin<Box<F>>>> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut all_done = true;
        for (slot, out) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    Poll::Pending => all_done = false,
                }
            }
        }
        if all_done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keeps_order_whatever_finishes_first() {
        let delays = [30u64, 0, 10];
        let futures = delays.iter().map(|&ms| async move {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            ms
        });
        assert_eq!(join_all(futures.collect()).await, vec![30, 0, 10]);
    }
}
