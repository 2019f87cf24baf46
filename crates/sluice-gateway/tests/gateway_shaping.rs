//! Shaping: a `mode = "shape"` leaky bucket holds admitted requests to pace them at its rate,
//! and denies what would wait beyond its capacity. Only lower bounds on time are asserted.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Client, start_with_clock};
use sluice_core::SystemClock;

const SHAPED: &str = r#"
[[policy]]
name = "paced"
algorithm = "leaky-bucket"
rate_per_second = 5
capacity = 3
mode = "shape"

[[route]]
path = "/api/*"
limits = [{ policy = "paced", key = "ip" }]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_is_paced_at_the_rate_and_the_excess_is_denied() {
    // Shaping sleeps in real time, so the store reads the real clock.
    let gw = start_with_clock(SHAPED, Arc::new(SystemClock::new())).await;
    let c = Client::new(gw.addr);
    let start = Instant::now();
    let burst: Vec<_> = (0..4)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move {
                let res = c.get("/api/work", &[]).await;
                (res.status, start.elapsed(), res)
            })
        })
        .collect();
    let mut admitted = Vec::new();
    let mut denied = Vec::new();
    for task in burst {
        let (status, elapsed, res) = task.await.unwrap();
        match status {
            200 => admitted.push(elapsed),
            429 => denied.push(res),
            other => panic!("unexpected status {other}: {}", res.text()),
        }
    }
    // capacity 3: three are admitted (one at once, two held), the fourth would wait too long.
    assert_eq!(admitted.len(), 3, "admitted {admitted:?}");
    assert_eq!(denied.len(), 1);
    assert!(denied[0].num("retry-after") >= 1);
    // At 5 per second the k-th admitted request cannot answer before k * 200 ms.
    admitted.sort();
    let interval = Duration::from_millis(200);
    for (k, elapsed) in admitted.iter().enumerate() {
        let floor = interval * k as u32;
        assert!(
            *elapsed + Duration::from_millis(2) >= floor,
            "request {k} answered after {elapsed:?}, before {floor:?}"
        );
    }
}
