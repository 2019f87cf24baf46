//! What a response's body says a request cost: the limits whose `cost_from` reads the body
//! (`response-bytes`, `response-json:POINTER`) settle their reservations when the body ends —
//! or when the client leaves mid-stream, to what was sent by then — and concurrency limits give
//! their slots back.
//!
//! A face that passes requests on wraps the response's body in [`Metered`]; the lifecycle
//! gives it a [`Meter`] when a limit asks for one. The meter sees each data frame as it goes
//! out, and settles once: at the end of the body, at its error, or when it is dropped.
//!
//! ```
//! # use std::sync::Arc;
//! use bytes::Bytes;
//! use http::HeaderMap;
//! use http_body_util::{BodyExt, Full};
//! use sluice_core::{ManualClock, TokenBucket};
//! use sluice_http::meter::{Meter, Metered, Reading};
//! use sluice_store::{Check, MemoryOptions, MemoryStore, NamedPolicy, Settle, Store};
//!
//! let bucket = NamedPolicy { name: "bytes".into(), policy: TokenBucket::new(1000, 1.0).unwrap().into() };
//! let store = Arc::new(MemoryStore::new(vec![bucket], MemoryOptions::default(), Arc::new(ManualClock::new(0))));
//! let check = Check { policy: 0, key: sluice_store::KeyHash([7; 16]), cost: 1 };
//! let verdict = store.decide_now(&[check]).unwrap();
//! assert_eq!(verdict.decisions[0].remaining, 999);
//!
//! // The response is 300 bytes: the reservation of 1 is settled to 300 when it has been sent.
//! let settle = Settle { check, charged_at: verdict.charged_at(0), actual: 1 };
//! let meter = Meter::new(store.clone(), vec![(settle, Reading::Bytes)], &HeaderMap::new()).unwrap();
//! let mut body = Metered::new(Full::new(Bytes::from(vec![b'x'; 300])));
//! body.attach(meter);
//! let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! let sent = runtime.block_on(body.collect()).unwrap().to_bytes();
//! assert_eq!(sent.len(), 300);
//! assert_eq!(store.decide_now(&[check]).unwrap().decisions[0].remaining, 699);
//! ```

mod events;
mod lease;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use serde_json::Value;
use sluice_config::CostFrom;
use sluice_core::Nanos;
use sluice_store::{Settle, Store};

use events::Events;

/// The most of a (not event-stream) JSON body kept to read its cost: a response past it keeps
/// its reservation. An LLM's completion is a few kilobytes; sluice holds this much per metered
/// response at most.
pub const MAX_JSON_BYTES: usize = 1024 * 1024;

/// What a charge is settled to when the response's body ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    /// The whole number at this JSON pointer (of the body, or of an event stream's last event
    /// that has it); the reservation stands when there is none.
    Json(String),
    /// The body bytes sent.
    Bytes,
    /// Nothing: a slot of a concurrency limit, held while the response lives (renewed every
    /// third of its lease, the policy's window), given back at its end.
    Release {
        /// The slot's lease: how long it is held without being renewed.
        lease: Nanos,
    },
}

impl Reading {
    /// What a limit's `cost_from` reads from the body; `None` for what is known with the head
    /// (a header, or what the inner service reported).
    pub fn of(from: &CostFrom) -> Option<Self> {
        match from {
            CostFrom::ResponseHeader(_) | CostFrom::ResponseExtension => None,
            CostFrom::ResponseJson(pointer) => Some(Reading::Json(pointer.clone())),
            CostFrom::ResponseBytes => Some(Reading::Bytes),
        }
    }
}

/// The settlements a response's body decides, and what it has read of the body so far.
pub struct Meter {
    /// Where the charges were made, and are settled.
    store: Arc<dyn Store>,
    /// Each charge read from the body, and what it is settled to.
    pending: Vec<(Settle, Reading)>,
    /// The concurrency slots held while the body lives.
    held: Option<lease::Held>,
    /// Data bytes sent so far.
    sent: u64,
    /// How the body's JSON is read, if a charge needs it.
    json: Json,
    /// Settled (or given up): nothing more to do, also when dropped.
    done: bool,
}

/// Concurrency slots taken out of a [`Meter`] ([`Meter::hold_slots`]): given back by
/// [`Slots::release`], or when dropped.
pub struct Slots(lease::Held);

impl Slots {
    /// Gives the slots back, at the store's time.
    pub fn release(mut self) {
        self.0.release();
    }
}

impl std::fmt::Debug for Slots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slots")
    }
}

/// How a metered body's JSON is read.
enum Json {
    /// No charge reads it, or it cannot be read (compressed): those charges keep their
    /// reservations.
    Off,
    /// A JSON document: kept whole (up to [`MAX_JSON_BYTES`]; `None` past it), read at its end.
    Whole(Option<Vec<u8>>),
    /// A server-sent-event stream: each event read as it ends, the last number found at each
    /// charge's pointer kept (in `pending`'s order).
    Events(Box<Events>, Vec<Option<u64>>),
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter").field("pending", &self.pending).field("sent", &self.sent).finish_non_exhaustive()
    }
}

impl Meter {
    /// A meter settling `pending` (charges made in `store`, and what each is settled to) from
    /// the body of a response with `headers`. `None` when there is nothing to settle.
    pub fn new(store: Arc<dyn Store>, pending: Vec<(Settle, Reading)>, headers: &HeaderMap) -> Option<Self> {
        if pending.is_empty() {
            return None;
        }
        // Concurrency slots are held apart (renewed, given back at the end); the rest read the body.
        let mut slots: Vec<(Settle, Nanos)> = Vec::new();
        let pending: Vec<(Settle, Reading)> = pending
            .into_iter()
            .filter_map(|(s, r)| match r {
                Reading::Release { lease } => {
                    slots.push((s, lease));
                    None
                }
                r => Some((s, r)),
            })
            .collect();
        let held = (!slots.is_empty()).then(|| lease::Held::new(store.clone(), slots));
        let reads_json = pending.iter().any(|(_, r)| matches!(r, Reading::Json(_)));
        let json = if !reads_json {
            Json::Off
        } else if encoded(headers) {
            tracing::debug!(target: "sluice::settle", "the response is compressed: its JSON is not read, the reservation stands");
            Json::Off
        } else if event_stream(headers) {
            Json::Events(Box::default(), vec![None; pending.len()])
        } else {
            Json::Whole(Some(Vec::new()))
        };
        Some(Self { store, pending, held, sent: 0, json, done: false })
    }

    /// Gives up reading the body (a face that cannot see it, or a response that is not the one
    /// the limits meant: sluice's own): the costs keep their reservations; the request is over,
    /// so its concurrency slots are given back.
    pub fn unmetered(mut self) {
        tracing::debug!(target: "sluice::settle", "this response's body is not metered: the reservation stands");
        self.pending.clear();
        self.finish(false);
    }

    /// Takes the concurrency slots out of the meter, to be given back later than the body's
    /// end (the simulator gives them back when the logged request ended); `None` when it holds
    /// none.
    pub fn hold_slots(&mut self) -> Option<Slots> {
        self.held.take().map(Slots)
    }

    /// Reads a body that is all there (a face's buffered response), and settles.
    pub fn read_whole(mut self, body: &[u8]) {
        self.sent(body);
        self.finish(true);
    }

    /// Settles as if a body of `bytes` bytes, whose content is not known, had been sent whole
    /// (a response seen in an access log): costs read from its JSON keep their reservations.
    pub fn read_sent(mut self, bytes: u64) {
        self.sent = bytes;
        self.json = Json::Off;
        self.finish(true);
    }

    /// The body's next data.
    pub fn sent(&mut self, data: &[u8]) {
        self.sent = self.sent.saturating_add(data.len() as u64);
        match &mut self.json {
            Json::Off => {}
            Json::Whole(kept) => {
                if let Some(buf) = kept {
                    if buf.len() + data.len() <= MAX_JSON_BYTES {
                        buf.extend_from_slice(data);
                    } else {
                        tracing::debug!(target: "sluice::settle", "the response's JSON is too long to read: the reservation stands");
                        *kept = None;
                    }
                }
            }
            Json::Events(events, found) => {
                let pending = &self.pending;
                events.feed(data, |event| {
                    if event == b"[DONE]" {
                        return;
                    }
                    // Most events (one per token) carry no usage: parsed only if they might.
                    let Some(doc) = pending
                        .iter()
                        .any(|(_, r)| names_first(r, event))
                        .then(|| serde_json::from_slice::<Value>(event).ok())
                        .flatten()
                    else {
                        return;
                    };
                    for ((_, r), found) in pending.iter().zip(found.iter_mut()) {
                        if let Some(n) = at_pointer(&doc, r) {
                            *found = Some(n);
                        }
                    }
                });
            }
        }
    }

    /// The body ended (`complete`), failed or was dropped: each charge settled to what it read.
    fn finish(&mut self, complete: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        if let Some(held) = &mut self.held {
            held.release();
        }
        let doc = match &mut self.json {
            Json::Whole(Some(buf)) if complete => serde_json::from_slice::<Value>(buf).ok(),
            _ => None,
        };
        let settles: Vec<Settle> = self
            .pending
            .iter()
            .enumerate()
            .filter_map(|(i, (settle, reading))| {
                let actual = match (reading, &self.json) {
                    // Held apart (`held`), never among these.
                    (Reading::Release { .. }, _) => Some(0),
                    (Reading::Bytes, _) => Some(self.sent),
                    (Reading::Json(_), Json::Events(_, found)) => found[i],
                    (Reading::Json(_), _) => doc.as_ref().and_then(|d| at_pointer(d, reading)),
                };
                if actual.is_none() {
                    tracing::debug!(target: "sluice::settle", ?reading, complete, "the response did not say what it cost: the reservation stands");
                }
                actual.map(|actual| Settle { actual, ..*settle })
            })
            .collect();
        settle(&self.store, settles);
    }
}

impl Drop for Meter {
    /// A body dropped before its end (the client left, or the connection failed): settled to
    /// what was sent.
    fn drop(&mut self) {
        self.finish(false);
    }
}

/// Settles `settles` in `store`: at once where the store can (memory), else on a task of the
/// runtime (the body that ended cannot wait for it).
fn settle(store: &Arc<dyn Store>, settles: Vec<Settle>) {
    if settles.is_empty() {
        return;
    }
    let failed = |e: sluice_store::StoreError| {
        tracing::warn!(target: "sluice::store", error = %e, "a response's cost could not be settled");
    };
    match store.settle_at_once(&settles) {
        Some(done) => done.unwrap_or_else(failed),
        None => match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let store = store.clone();
                runtime.spawn(async move { store.settle(&settles, None).await.unwrap_or_else(failed) });
            }
            Err(_) => tracing::warn!(target: "sluice::store", "no runtime to settle a response's cost on"),
        },
    }
}

/// True when the body is sent with a content coding: its JSON cannot be read as it goes.
fn encoded(headers: &HeaderMap) -> bool {
    headers.get_all(http::header::CONTENT_ENCODING).iter().any(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
}

/// True for `text/event-stream` (any case, any parameters).
fn event_stream(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| {
        let essence = v.as_bytes().split(|&b| b == b';').next().unwrap_or_default();
        essence.trim_ascii().eq_ignore_ascii_case(b"text/event-stream")
    })
}

/// The whole number at `reading`'s pointer in `doc`, if there is one there.
fn at_pointer(doc: &Value, reading: &Reading) -> Option<u64> {
    let Reading::Json(pointer) = reading else { return None };
    doc.pointer(pointer)?.as_u64()
}

/// True when `event` might hold `reading`'s pointer: its first name appears in it, quoted. (A
/// name spelled with escapes is missed: that event's cost is not read, never a wrong one.)
fn names_first(reading: &Reading, event: &[u8]) -> bool {
    let Reading::Json(pointer) = reading else { return false };
    let first = pointer[1..].split('/').next().unwrap_or_default().replace("~1", "/").replace("~0", "~");
    let quoted = format!("\"{first}\"");
    event.windows(quoted.len()).any(|w| w == quoted.as_bytes())
}

/// A response body whose data a [`Meter`] sees go out, when one is attached. Without one it is
/// the body it wraps, at the cost of a branch per frame.
#[derive(Debug)]
pub struct Metered<B> {
    body: B,
    meter: Option<Box<Meter>>,
}

impl<B> Metered<B> {
    /// `body`, not yet metered.
    pub fn new(body: B) -> Self {
        Self { body, meter: None }
    }

    /// Meters the body from now on.
    pub fn attach(&mut self, meter: Meter) {
        self.meter = Some(Box::new(meter));
    }

    /// The wrapped body.
    pub fn get_mut(&mut self) -> &mut B {
        &mut self.body
    }
}

impl<B: Body<Data = Bytes> + Unpin> Body for Metered<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        if let Some(meter) = &mut this.meter {
            match &frame {
                Some(Ok(f)) => {
                    if let Some(data) = f.data_ref() {
                        meter.sent(data);
                    }
                    // A server may stop polling a body that says it has ended.
                    if this.body.is_end_stream() {
                        meter.finish(true);
                    }
                }
                None => meter.finish(true),
                Some(Err(_)) => meter.finish(false),
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests;
