use std::collections::VecDeque;
use std::convert::Infallible;

use http::HeaderValue;
use sluice_core::{ManualClock, TokenBucket};
use sluice_store::{Check, KeyHash, MemoryOptions, MemoryStore, NamedPolicy};

use super::*;

/// A body sent in the given chunks; says it has ended once the last one is out.
struct Chunks(VecDeque<Bytes>);

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_empty()
    }
}

const CAPACITY: u64 = 10_000;

/// A store with one bucket of 10,000 that hardly refills, a request's reservation of 5 in it,
/// and the charge to settle.
fn reserved() -> (Arc<MemoryStore>, Settle) {
    let bucket = NamedPolicy { name: "tokens".into(), policy: TokenBucket::new(CAPACITY, 0.000_001).unwrap().into() };
    let store = Arc::new(MemoryStore::new(vec![bucket], MemoryOptions::default(), Arc::new(ManualClock::new(0))));
    let check = Check { policy: 0, key: KeyHash([3; 16]), cost: 5 };
    let verdict = store.decide_now(&[check]).unwrap();
    (store, Settle { check, charged_at: verdict.charged_at(0), actual: 5 })
}

/// What the key has been charged in all (the next request of 1 is not counted).
fn charged(store: &MemoryStore) -> u64 {
    let d = store.decide_now(&[Check { policy: 0, key: KeyHash([3; 16]), cost: 1 }]).unwrap();
    CAPACITY - d.decisions[0].remaining - 1
}

fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    pairs.iter().map(|(k, v)| (http::HeaderName::from_static(k), HeaderValue::from_static(v))).collect()
}

/// `chunks` sent as a body metered for `from`, polled for `frames` frames (all: `usize::MAX`)
/// and dropped; what the key was charged in the end.
fn sent(from: &str, response: &HeaderMap, chunks: &[&[u8]], frames: usize) -> u64 {
    let (store, settle) = reserved();
    let reading = Reading::of(&CostFrom::parse(from).unwrap()).expect("a body cost");
    let meter = Meter::new(store.clone(), vec![(settle, reading)], response).unwrap();
    let mut body = Metered::new(Chunks(chunks.iter().map(|c| Bytes::copy_from_slice(c)).collect()));
    body.attach(meter);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for _ in 0..frames {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(_)) => {}
            _ => break,
        }
    }
    drop(body);
    charged(&store)
}

const ALL: usize = usize::MAX;

#[test]
fn bytes_are_counted_to_the_end_or_to_the_client_leaving() {
    let none = HeaderMap::new();
    assert_eq!(sent("response-bytes", &none, &[b"hello", b" ", b"world"], ALL), 11);
    assert_eq!(sent("response-bytes", &none, &[b"hello", b" ", b"world"], 2), 6, "left after two frames");
    assert_eq!(sent("response-bytes", &none, &[b"hello"], 0), 0, "left before a byte: nothing sent, nothing used");
    assert_eq!(sent("response-bytes", &none, &[], ALL), 0);
}

#[test]
fn a_json_body_is_read_at_its_end() {
    let json = headers(&[("content-type", "application/json")]);
    let doc: &[&[u8]] = &[b"{\"id\":\"x\",\"usage\":{\"prompt_tokens\":9,", b"\"total_tokens\":42}}"];
    assert_eq!(sent("response-json:/usage/total_tokens", &json, doc, ALL), 42);
    assert_eq!(sent("response-json:/usage/prompt_tokens", &json, doc, ALL), 9);
    // The last frame out says the body has ended: read then, even if nobody polls again.
    assert_eq!(sent("response-json:/usage/total_tokens", &json, doc, 2), 42);
    // Cut short, missing, not a whole number, not JSON: the reservation (5) stands.
    assert_eq!(sent("response-json:/usage/total_tokens", &json, doc, 1), 5);
    assert_eq!(sent("response-json:/usage/completion_tokens", &json, doc, ALL), 5);
    for odd in [
        &b"{\"usage\":{\"total_tokens\":-3}}"[..],
        b"{\"usage\":{\"total_tokens\":4.5}}",
        b"{\"usage\":{\"total_tokens\":\"42\"}}",
        b"not json",
    ] {
        assert_eq!(
            sent("response-json:/usage/total_tokens", &json, &[odd], ALL),
            5,
            "{}",
            String::from_utf8_lossy(odd)
        );
    }
    // JSON's escapes are JSON's: a pointer reads the name as the parser decodes it.
    assert_eq!(sent("response-json:/a~1b", &json, &[b"{\"a/b\":7}"], ALL), 7);
}

#[test]
fn a_json_body_sluice_cannot_read_keeps_its_reservation() {
    let gzip = headers(&[("content-type", "application/json"), ("content-encoding", "gzip")]);
    assert_eq!(sent("response-json:/n", &gzip, &[b"{\"n\":42}"], ALL), 5);
    let json = headers(&[("content-type", "application/json")]);
    let mut long = b"{\"n\":42,\"pad\":\"".to_vec();
    long.resize(MAX_JSON_BYTES, b'x');
    long.extend_from_slice(b"\"}");
    assert_eq!(sent("response-json:/n", &json, &[&long], ALL), 5);
    // Identity is no coding; bytes are counted whatever the coding.
    assert_eq!(sent("response-json:/n", &headers(&[("content-encoding", "identity")]), &[b"{\"n\":42}"], ALL), 42);
    assert_eq!(sent("response-bytes", &gzip, &[b"12345678"], ALL), 8);
}

const STREAM: &[&[u8]] = &[
    b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n",
    b"data: {\"choices\":[{\"delta\":{\"content\":\" there, \\\"usage\\\": {\\\"total_tokens\\\": 1}\"}}]}\n\n",
    b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":30,\"total_tokens\":42}}\n\n",
    b"data: [DONE]\n\n",
];

#[test]
fn an_event_stream_settles_to_the_last_usage_it_sent() {
    let sse = headers(&[("content-type", "Text/Event-Stream; charset=utf-8")]);
    assert_eq!(sent("response-json:/usage/total_tokens", &sse, STREAM, ALL), 42);
    // The client left after the usage event: settled to it.
    assert_eq!(sent("response-json:/usage/total_tokens", &sse, STREAM, 3), 42);
    // The client left before it: the reservation stands (text that looks like usage inside the
    // content is a string, not the usage).
    assert_eq!(sent("response-json:/usage/total_tokens", &sse, STREAM, 2), 5);
    // Bytes of a stream are bytes.
    let all: usize = STREAM.iter().map(|c| c.len()).sum();
    assert_eq!(sent("response-bytes", &sse, STREAM, ALL), all as u64);
    // The same stream not marked as events is not a JSON document: it keeps its reservation.
    assert_eq!(sent("response-json:/usage/total_tokens", &HeaderMap::new(), STREAM, ALL), 5);
}

#[test]
fn several_charges_settle_each_to_its_own_reading_in_one_settlement() {
    let (store, settle) = reserved();
    let other = Check { key: KeyHash([4; 16]), ..settle.check };
    let verdict = store.decide_now(&[other]).unwrap();
    let second = Settle { check: other, charged_at: verdict.charged_at(0), actual: 5 };
    let pending = vec![(settle, Reading::Json("/usage/total_tokens".into())), (second, Reading::Bytes)];
    // A header's cost is read from the head, not here.
    assert_eq!(Reading::of(&CostFrom::ResponseHeader("x-usage".into())), None);
    let meter = Meter::new(store.clone(), pending, &headers(&[("content-type", "text/event-stream")])).unwrap();
    let mut body = Metered::new(Chunks(STREAM.iter().map(|c| Bytes::from_static(c)).collect()));
    body.attach(meter);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    while let Poll::Ready(Some(_)) = Pin::new(&mut body).poll_frame(&mut cx) {}
    assert_eq!(charged(&store), 42);
    let d = store.decide_now(&[Check { cost: 1, ..other }]).unwrap();
    let all: u64 = STREAM.iter().map(|c| c.len() as u64).sum();
    assert_eq!(CAPACITY - d.decisions[0].remaining - 1, all);
}

#[test]
fn no_meter_without_a_body_cost_and_a_meter_given_up_settles_nothing() {
    let (store, settle) = reserved();
    assert!(Meter::new(store.clone(), Vec::new(), &HeaderMap::new()).is_none());
    Meter::new(store.clone(), vec![(settle, Reading::Bytes)], &HeaderMap::new()).unwrap().unmetered();
    // Unattached, a metered body is the body it wraps.
    let mut body = Metered::new(Chunks([Bytes::from_static(b"ab")].into()));
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(matches!(Pin::new(&mut body).poll_frame(&mut cx), Poll::Ready(Some(Ok(_)))));
    assert!(body.is_end_stream());
    drop(body);
    assert_eq!(charged(&store), 5, "the reservation, unsettled");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(sluice_core::fuzz_cases(500)))]

    /// Any response body, cut anywhere, read as JSON or as events: nothing panics, bytes are
    /// exactly what went out, and a JSON cost is either the reservation or a number the body
    /// holds.
    #[test]
    fn any_body_settles_without_a_panic(
        chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..6),
        frames in 0usize..8,
        events in proptest::prelude::any::<bool>(),
    ) {
        let h = if events { headers(&[("content-type", "text/event-stream")]) } else { HeaderMap::new() };
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let out: u64 = chunks.iter().take(frames).map(|c| c.len() as u64).sum();
        proptest::prop_assert_eq!(sent("response-bytes", &h, &refs, frames), out);
        let json = sent("response-json:/n", &h, &refs, frames);
        let text: Vec<u8> = chunks.concat();
        proptest::prop_assert!(json == 5 || String::from_utf8_lossy(&text).contains(&json.to_string()));
    }
}

/// A store that settles only when awaited (as Redis does): the meter's settlement goes on a task.
struct Awaited(Arc<MemoryStore>);

impl Store for Awaited {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<u64>) -> sluice_store::StoreFuture<'a> {
        self.0.decide(checks, at)
    }

    fn policies(&self) -> &[NamedPolicy] {
        self.0.policies()
    }

    fn kind(&self) -> &'static str {
        "awaited"
    }

    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<u64>) -> sluice_store::SettleFuture<'a> {
        self.0.settle(settles, at)
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_store_that_must_be_awaited_is_settled_on_a_task() {
    let (store, settle) = reserved();
    let meter = Meter::new(Arc::new(Awaited(store.clone())), vec![(settle, Reading::Bytes)], &HeaderMap::new());
    let mut body = Metered::new(Chunks([Bytes::from_static(b"0123456789")].into()));
    body.attach(meter.unwrap());
    let mut cx = Context::from_waker(std::task::Waker::noop());
    while let Poll::Ready(Some(_)) = Pin::new(&mut body).poll_frame(&mut cx) {}
    // Not yet: the settlement waits for its task.
    let first = store.decide_now(&[Check { cost: 1, ..settle.check }]).unwrap().decisions[0].remaining;
    assert_eq!(first, CAPACITY - 5 - 1);
    tokio::task::yield_now().await;
    let then = store.decide_now(&[Check { cost: 1, ..settle.check }]).unwrap().decisions[0].remaining;
    assert_eq!(then, CAPACITY - 10 - 2, "settled to the 10 bytes sent");
}

#[test]
fn without_a_runtime_an_awaited_settlement_is_given_up_not_a_panic() {
    let (store, settle) = reserved();
    let meter = Meter::new(Arc::new(Awaited(store.clone())), vec![(settle, Reading::Bytes)], &HeaderMap::new());
    meter.unwrap().read_whole(b"0123456789");
    assert_eq!(charged(&store), 5, "the reservation stands");
}

#[test]
fn a_concurrency_slot_is_given_back_at_the_end_at_the_client_leaving_or_when_given_up() {
    for frames in [ALL, 1, 0] {
        let (store, settle) = reserved();
        let meter =
            Meter::new(store.clone(), vec![(settle, Reading::Release { lease: 0 })], &HeaderMap::new()).unwrap();
        let mut body = Metered::new(Chunks([Bytes::from_static(b"ab"), Bytes::from_static(b"cd")].into()));
        body.attach(meter);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for _ in 0..frames {
            if !matches!(Pin::new(&mut body).poll_frame(&mut cx), Poll::Ready(Some(_))) {
                break;
            }
        }
        drop(body);
        assert_eq!(charged(&store), 0, "after {frames} frames");
    }
    // Given up: the slot is given back, a cost keeps its reservation.
    let (store, settle) = reserved();
    let other = Check { key: KeyHash([4; 16]), ..settle.check };
    let second = Settle { check: other, charged_at: store.decide_now(&[other]).unwrap().charged_at(0), actual: 5 };
    let pending = vec![(settle, Reading::Release { lease: 0 }), (second, Reading::Bytes)];
    Meter::new(store.clone(), pending, &HeaderMap::new()).unwrap().unmetered();
    assert_eq!(charged(&store), 0, "released");
    let d = store.decide_now(&[Check { cost: 1, ..other }]).unwrap();
    assert_eq!(CAPACITY - d.decisions[0].remaining - 1, 5, "the bytes' reservation stands");
}

/// One slot per key, leased for 3 s, on a memory store whose clock moves by hand; a request
/// holding it.
fn slot_held(store: Arc<dyn Store>, memory: &MemoryStore) -> (Meter, Check) {
    let check = Check { policy: 0, key: KeyHash([5; 16]), cost: 1 };
    let v = memory.decide_now(&[check]).unwrap();
    assert!(v.allowed);
    let slot = (Settle { check, charged_at: v.charged_at(0), actual: 1 }, Reading::Release { lease: 3 * SEC });
    (Meter::new(store, vec![slot], &HeaderMap::new()).unwrap(), check)
}

const SEC: u64 = sluice_core::NANOS_PER_SEC;

fn slots_store(clock: Arc<ManualClock>) -> Arc<MemoryStore> {
    let slots = NamedPolicy { name: "slots".into(), policy: sluice_core::SlidingLog::new(1, 3 * SEC).unwrap().into() };
    Arc::new(MemoryStore::new(vec![slots], MemoryOptions::default(), clock))
}

/// Both clocks (the store's and the runtime's, paused) moved by `by`, and the renewal let run.
async fn pass(clock: &ManualClock, by: std::time::Duration) {
    clock.advance(by.as_nanos() as u64);
    tokio::time::advance(by).await;
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_slot_held_past_its_lease_is_renewed_until_the_response_ends() {
    let clock = Arc::new(ManualClock::new(1_000 * SEC));
    let store = slots_store(clock.clone());
    let (meter, check) = slot_held(store.clone(), &store);
    // Ten seconds, more than three leases: the slot is renewed every second and still held.
    for step in 0..20 {
        pass(&clock, std::time::Duration::from_millis(500)).await;
        assert!(!store.decide_now(&[check]).unwrap().allowed, "the slot was let go after {} ms", (step + 1) * 500);
    }
    drop(meter);
    assert!(store.decide_now(&[check]).unwrap().allowed, "given back at once when the response ends");
}

/// A store whose settlements wait at a gate (a slow Redis): a renewal can be in flight when the
/// response ends.
struct Gated(Arc<MemoryStore>, Arc<tokio::sync::Semaphore>);

impl Store for Gated {
    fn decide<'a>(&'a self, checks: &'a [Check], at: Option<u64>) -> sluice_store::StoreFuture<'a> {
        self.0.decide(checks, at)
    }

    fn policies(&self) -> &[NamedPolicy] {
        self.0.policies()
    }

    fn kind(&self) -> &'static str {
        "gated"
    }

    fn settle<'a>(&'a self, settles: &'a [Settle], at: Option<u64>) -> sluice_store::SettleFuture<'a> {
        Box::pin(async move {
            self.1.acquire().await.expect("the gate stays").forget();
            self.0.settle(settles, at).await
        })
    }

    fn now(&self) -> Option<u64> {
        self.0.now()
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_response_that_ends_during_a_renewal_gives_back_where_the_renewal_charged() {
    let clock = Arc::new(ManualClock::new(1_000 * SEC));
    let memory = slots_store(clock.clone());
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (meter, check) = slot_held(Arc::new(Gated(memory.clone(), gate.clone())), &memory);
    // The first renewal (after a second) waits at the gate; the response ends meanwhile.
    pass(&clock, std::time::Duration::from_millis(1_100)).await;
    drop(meter);
    assert!(!memory.decide_now(&[check]).unwrap().allowed, "held until the renewal is done");
    // The renewal goes through, then the release, at the renewed time: nothing is left.
    gate.add_permits(2);
    pass(&clock, std::time::Duration::from_millis(10)).await;
    assert!(memory.decide_now(&[check]).unwrap().allowed, "given back after the renewal");
    // And the slot then taken is the only one: a second is denied.
    assert!(!memory.decide_now(&[check]).unwrap().allowed);
}
