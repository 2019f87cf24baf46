//! The lean connection driven through scripted in-memory sockets, in paused (virtual) time: a
//! scripted Redis answers in order, as Redis does, but cuts its replies anywhere, pauses between
//! the pieces, falls silent, closes mid-reply or sends what is not RESP, while callers come and
//! go (some giving up first). Every caller must get its own reply or an error, and none may
//! wait forever: each waits under a timeout, as the store's calls do. With time paused, a caller
//! that nothing wakes sleeps until its deadline, so a caller still waiting at its deadline timed
//! out, even if the deadline's wake-up found its reply (tokio's `timeout` polls the request
//! first): a lost wake-up is a time-out here, as it would be a late answer in production.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use proptest::prelude::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf, duplex};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};

use super::{LeanConn, READ_BUFFER};
use crate::resp::{self, frame_len};

/// How long a patient caller waits; long beside every pause of a script.
const PATIENT: Duration = Duration::from_secs(10);

/// What a caller ends with.
#[derive(Debug)]
enum Outcome {
    Reply(Vec<u8>),
    Failed(io::Error),
    /// Still waiting at its deadline.
    TimedOut,
}

impl Outcome {
    #[track_caller]
    fn reply(&self) -> &[u8] {
        match self {
            Outcome::Reply(bytes) => bytes,
            other => panic!("a reply expected, not {other:?}"),
        }
    }

    #[track_caller]
    fn error(&self) -> &io::Error {
        match self {
            Outcome::Failed(e) => e,
            other => panic!("an error expected, not {other:?}"),
        }
    }
}

/// Writes a request naming its caller: `ECHO n`.
fn echo(out: &mut Vec<u8>, caller: usize) {
    resp::array(out, 2);
    resp::bulk(out, b"ECHO");
    resp::bulk_u64(out, caller as u64);
}

/// The caller a request names ([`echo`]).
fn caller_of(request: &[u8]) -> usize {
    let text = std::str::from_utf8(request).expect("requests are text");
    text.split("\r\n").nth(4).and_then(|n| n.parse().ok()).expect("an ECHO request")
}

/// A reply that only `caller` may receive: an array of its number and `value`.
fn reply_for(caller: usize, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::array(&mut out, 2);
    out.extend_from_slice(format!(":{caller}\r\n").as_bytes());
    out.extend_from_slice(value);
    out
}

/// How the scripted Redis answers.
#[derive(Debug, Clone, Default)]
struct Script {
    /// The reply to each caller's request, by caller.
    replies: Vec<Vec<u8>>,
    /// The sizes of the pieces replies are written in, used in turn (empty: each piece as large as
    /// what is due).
    pieces: Vec<usize>,
    /// The pauses, in milliseconds, before each piece, used in turn.
    pauses: Vec<u64>,
    /// Closes the connection once this many bytes of replies are written.
    close_at: Option<usize>,
    /// Answers this many requests, then reads on and answers no more.
    silent_after: Option<usize>,
}

/// The callers whose whole reply the scripted Redis wrote, in order.
type Written = Arc<Mutex<Vec<usize>>>;

/// Answers the requests read from `socket` in order, as `script` says.
async fn scripted_redis(mut socket: DuplexStream, script: Script, written: Written) {
    let mut requests = Vec::new();
    // Replies due, not written yet, and where each caller's ends in all bytes of replies.
    let mut due = Vec::new();
    let mut ends = VecDeque::new();
    let (mut queued, mut sent, mut answered, mut turn) = (0, 0, 0, 0);
    loop {
        if due.is_empty() {
            let mut buf = [0u8; 64];
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => requests.extend_from_slice(&buf[..n]),
            }
            while let Some(len) = frame_len(&requests).expect("the connection writes RESP") {
                let caller = caller_of(&requests[..len]);
                requests.drain(..len);
                if script.silent_after.is_some_and(|n| answered >= n) {
                    continue;
                }
                answered += 1;
                due.extend_from_slice(&script.replies[caller]);
                queued += script.replies[caller].len();
                ends.push_back((caller, queued));
            }
            continue;
        }
        let pause = script.pauses.get(turn % script.pauses.len().max(1)).copied().unwrap_or(0);
        sleep(Duration::from_millis(pause)).await;
        let mut size = script.pieces.get(turn % script.pieces.len().max(1)).copied().unwrap_or(due.len());
        size = size.clamp(1, due.len());
        turn += 1;
        let closes = script.close_at.is_some_and(|at| sent + size >= at);
        if let Some(at) = script.close_at.filter(|_| closes) {
            size = at - sent;
        }
        if socket.write_all(&due[..size]).await.is_err() {
            return;
        }
        due.drain(..size);
        sent += size;
        while ends.front().is_some_and(|&(_, end)| end <= sent) {
            let (caller, _) = ends.pop_front().unwrap();
            written.lock().unwrap().push(caller);
        }
        if closes {
            return;
        }
    }
}

/// A caller: waits `start` ms, then asks for its reply and waits at most `patience` for it.
fn caller(
    conn: &Arc<LeanConn<impl AsyncRead + AsyncWrite + Unpin + Send + 'static>>,
    n: usize,
    start: u64,
    patience: Duration,
) -> JoinHandle<Outcome> {
    let conn = Arc::clone(conn);
    tokio::spawn(async move {
        sleep(Duration::from_millis(start)).await;
        let deadline = Instant::now() + patience;
        match timeout(patience, conn.request(|out| echo(out, n), <[u8]>::to_vec)).await {
            _ if Instant::now() >= deadline => Outcome::TimedOut,
            Ok(Ok(reply)) => Outcome::Reply(reply),
            Ok(Err(e)) => Outcome::Failed(e),
            Err(_) => Outcome::TimedOut,
        }
    })
}

/// A connection to a scripted Redis over a pipe of `pipe` bytes each way, reading into a
/// buffer of `read_buffer` bytes to begin with; and the record of what it wrote.
fn connect(script: Script, pipe: usize, read_buffer: usize) -> (Arc<LeanConn<DuplexStream>>, Written) {
    let (ours, theirs) = duplex(pipe);
    let written = Written::default();
    tokio::spawn(scripted_redis(theirs, script, Arc::clone(&written)));
    (Arc::new(LeanConn::new(ours, read_buffer)), written)
}

/// What each caller ended with, in the callers' order.
async fn outcomes(callers: Vec<JoinHandle<Outcome>>) -> Vec<Outcome> {
    let mut out = Vec::new();
    for c in callers {
        out.push(c.await.expect("a caller ran to its end"));
    }
    out
}

/// A simple-string reply for each of `n` callers, naming it.
fn plain_replies(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|c| reply_for(c, format!("+reply {c}\r\n").as_bytes())).collect()
}

#[tokio::test(start_paused = true)]
async fn every_caller_gets_its_own_reply_however_replies_are_cut() {
    let replies = plain_replies(12);
    let script =
        Script { replies: replies.clone(), pieces: vec![1, 3, 7, 2, 40], pauses: vec![0, 1, 3], ..Script::default() };
    // A pipe of 5 bytes: requests and replies both cross it in pieces.
    let (conn, _) = connect(script, 5, 4);
    let callers = (0..12).map(|c| caller(&conn, c, (c as u64 * 7) % 5, PATIENT)).collect();
    for (c, outcome) in outcomes(callers).await.into_iter().enumerate() {
        assert_eq!(outcome.reply(), replies[c], "caller {c}");
    }
    assert!(!conn.is_broken());
}

#[tokio::test(start_paused = true)]
async fn a_reply_whose_caller_gave_up_goes_to_nobody() {
    let replies = plain_replies(3);
    // 20 ms before every reply.
    let script = Script { replies: replies.clone(), pauses: vec![20], ..Script::default() };
    let (conn, _) = connect(script, 64, READ_BUFFER);
    let impatient = caller(&conn, 0, 0, Duration::from_millis(5));
    let next = caller(&conn, 1, 1, PATIENT);
    let later = caller(&conn, 2, 30, PATIENT);
    let got = outcomes(vec![impatient, next, later]).await;
    assert!(matches!(got[0], Outcome::TimedOut), "caller 0 gave up: {:?}", got[0]);
    assert_eq!(got[1].reply(), replies[1]);
    assert_eq!(got[2].reply(), replies[2]);
    assert!(!conn.is_broken());
}

#[tokio::test(start_paused = true)]
async fn a_server_gone_silent_leaves_its_callers_to_their_timeouts() {
    let replies = plain_replies(4);
    let script = Script { replies: replies.clone(), silent_after: Some(2), pauses: vec![1], ..Script::default() };
    let (conn, _) = connect(script, 64, READ_BUFFER);
    let callers = (0..4).map(|c| caller(&conn, c, c as u64, Duration::from_millis(100))).collect();
    let got = outcomes(callers).await;
    assert_eq!(got[0].reply(), replies[0]);
    assert_eq!(got[1].reply(), replies[1]);
    assert!(got[2..].iter().all(|o| matches!(o, Outcome::TimedOut)), "{got:?}");
}

#[tokio::test(start_paused = true)]
async fn closing_mid_reply_fails_every_caller_waiting_and_every_later_one() {
    let replies = plain_replies(4);
    // Two whole replies, then half of the third.
    let close_at = replies[0].len() + replies[1].len() + replies[2].len() / 2;
    let script = Script { replies: replies.clone(), close_at: Some(close_at), pieces: vec![3], ..Script::default() };
    let (conn, written) = connect(script, 64, READ_BUFFER);
    let callers = (0..4).map(|c| caller(&conn, c, 0, PATIENT)).collect();
    let got = outcomes(callers).await;
    assert_eq!(*written.lock().unwrap(), [0, 1]);
    assert_eq!(got[0].reply(), replies[0]);
    assert_eq!(got[1].reply(), replies[1]);
    for outcome in &got[2..] {
        assert_eq!(outcome.error().kind(), io::ErrorKind::ConnectionReset);
    }
    assert!(conn.is_broken());
    let after = outcomes(vec![caller(&conn, 0, 0, PATIENT)]).await;
    assert_eq!(after[0].error().kind(), io::ErrorKind::ConnectionReset);
}

#[tokio::test(start_paused = true)]
async fn what_is_not_resp_breaks_the_connection_for_every_caller() {
    let mut replies = plain_replies(3);
    replies[1] = b"?what\r\n".to_vec();
    let script = Script { replies: replies.clone(), pauses: vec![1], ..Script::default() };
    let (conn, _) = connect(script, 64, READ_BUFFER);
    let got = outcomes((0..3).map(|c| caller(&conn, c, 0, PATIENT)).collect()).await;
    assert_eq!(got[0].reply(), replies[0]);
    for outcome in &got[1..] {
        assert_eq!(outcome.error().kind(), io::ErrorKind::InvalidData);
    }
    assert!(conn.is_broken());
}

#[tokio::test(start_paused = true)]
async fn an_error_reply_is_its_callers_reply() {
    let mut replies = plain_replies(3);
    replies[1] = b"-NOSCRIPT No matching script\r\n".to_vec();
    let script = Script { replies: replies.clone(), ..Script::default() };
    let (conn, _) = connect(script, 64, READ_BUFFER);
    let got = outcomes((0..3).map(|c| caller(&conn, c, 0, PATIENT)).collect()).await;
    for (c, outcome) in got.iter().enumerate() {
        assert_eq!(outcome.reply(), replies[c]);
    }
    assert!(!conn.is_broken());
}

#[tokio::test(start_paused = true)]
async fn a_caller_whose_decode_panics_leaves_the_next_its_reply() {
    let replies = plain_replies(2);
    let script = Script { replies: replies.clone(), pauses: vec![1], ..Script::default() };
    let (conn, _) = connect(script, 64, READ_BUFFER);
    let panicking = {
        let conn = Arc::clone(&conn);
        tokio::spawn(async move { conn.request(|out| echo(out, 0), |_| panic!("a decode that panics")).await })
    };
    let next = caller(&conn, 1, 0, PATIENT);
    assert!(panicking.await.is_err_and(|e| e.is_panic()));
    assert_eq!(next.await.unwrap().reply(), replies[1]);
}

/// A pipe that counts the writes made on it and fails: its reads after `reads_fail_after`
/// bytes, its writes once `writes_fail` is set.
struct Faulty {
    inner: DuplexStream,
    reads_fail_after: usize,
    writes_fail: Arc<AtomicBool>,
    writes: Arc<AtomicUsize>,
}

impl Faulty {
    /// `inner`, failing nothing.
    fn over(inner: DuplexStream) -> Self {
        Faulty { inner, reads_fail_after: usize::MAX, writes_fail: Arc::default(), writes: Arc::default() }
    }
}

impl AsyncRead for Faulty {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        std::task::ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        let read = buf.filled().len() - before;
        if read > self.reads_fail_after {
            return Poll::Ready(Err(io::Error::other("a scripted read error")));
        }
        self.reads_fail_after -= read;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Faulty {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        if self.writes_fail.load(Ordering::Relaxed) {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "a scripted write error")));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_error_fails_every_caller_waiting() {
    let replies = plain_replies(3);
    let (ours, theirs) = duplex(64);
    let script = Script { replies: replies.clone(), pauses: vec![1], ..Script::default() };
    tokio::spawn(scripted_redis(theirs, script, Written::default()));
    let faulty = Faulty { reads_fail_after: replies[0].len(), ..Faulty::over(ours) };
    let conn = Arc::new(LeanConn::new(faulty, READ_BUFFER));
    let got = outcomes((0..3).map(|c| caller(&conn, c, 0, PATIENT)).collect()).await;
    assert_eq!(got[0].reply(), replies[0]);
    for outcome in &got[1..] {
        assert_eq!(outcome.error().to_string(), "a scripted read error");
    }
    assert!(conn.is_broken());
}

#[tokio::test(start_paused = true)]
async fn a_write_error_fails_the_request_at_once() {
    let (ours, _theirs) = duplex(64);
    let faulty = Faulty { writes_fail: Arc::new(AtomicBool::new(true)), ..Faulty::over(ours) };
    let conn = Arc::new(LeanConn::new(faulty, 16));
    let got = outcomes(vec![caller(&conn, 0, 0, PATIENT)]).await;
    assert_eq!(got[0].error().kind(), io::ErrorKind::BrokenPipe);
    assert!(conn.is_broken());
}

#[tokio::test(start_paused = true)]
async fn a_write_error_fails_the_caller_reading_too() {
    // Redis has the first request and says nothing; the second's write fails. The first, which
    // waits on the socket for its reply, must learn of it at once, not at its timeout.
    let script = Script { replies: plain_replies(2), silent_after: Some(0), ..Script::default() };
    let (ours, theirs) = duplex(64);
    tokio::spawn(scripted_redis(theirs, script, Written::default()));
    let writes_fail = Arc::new(AtomicBool::new(false));
    let faulty = Faulty { writes_fail: Arc::clone(&writes_fail), ..Faulty::over(ours) };
    let conn = Arc::new(LeanConn::new(faulty, READ_BUFFER));
    let reading = caller(&conn, 0, 0, PATIENT);
    sleep(Duration::from_millis(5)).await;
    assert!(!reading.is_finished(), "the first request waits for its reply");
    writes_fail.store(true, Ordering::Relaxed);
    let got = outcomes(vec![reading, caller(&conn, 1, 0, PATIENT)]).await;
    for outcome in got {
        assert_eq!(outcome.error().kind(), io::ErrorKind::BrokenPipe);
    }
}

#[tokio::test(start_paused = true)]
async fn requests_made_while_one_is_in_flight_go_out_in_one_write() {
    let replies = plain_replies(6);
    let (ours, theirs) = duplex(1 << 12);
    let script = Script { replies: replies.clone(), pauses: vec![5], ..Script::default() };
    tokio::spawn(scripted_redis(theirs, script, Written::default()));
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = Faulty { writes: Arc::clone(&writes), ..Faulty::over(ours) };
    let conn = Arc::new(LeanConn::new(counted, READ_BUFFER));
    // One in flight, then five at once while it waits for its reply.
    let first = caller(&conn, 0, 0, PATIENT);
    let rest = (1..6).map(|c| caller(&conn, c, 1, PATIENT));
    let got = outcomes(std::iter::once(first).chain(rest).collect()).await;
    for (c, outcome) in got.iter().enumerate() {
        assert_eq!(outcome.reply(), replies[c]);
    }
    assert_eq!(writes.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn writes_the_pipe_refuses_are_finished() {
    // A pipe of one byte each way: nearly every write is refused, most of them while another
    // request reads; 16 callers at once.
    let replies = plain_replies(16);
    let script = Script { replies: replies.clone(), ..Script::default() };
    let (conn, _) = connect(script, 1, 8);
    let got = outcomes((0..16).map(|c| caller(&conn, c, 0, PATIENT)).collect()).await;
    for (c, outcome) in got.iter().enumerate() {
        assert_eq!(outcome.reply(), replies[c], "caller {c}");
    }
}

/// One caller of a generated run: when it asks, how long it waits, what its reply holds.
#[derive(Debug, Clone)]
struct Caller {
    start: u64,
    /// Milliseconds, or patient.
    patience: Option<u64>,
    value: Vec<u8>,
}

fn callers() -> impl Strategy<Value = Vec<Caller>> {
    let one = (0u64..20, proptest::option::weighted(0.3, 1u64..15), resp::tests::value())
        .prop_map(|(start, patience, value)| Caller { start, patience, value });
    proptest::collection::vec(one, 1..10)
}

/// How a generated run's Redis ends, if it does.
#[derive(Debug, Clone)]
enum Ending {
    Never,
    /// Closes after this share (in 1/256) of the bytes of every reply.
    Close(u8),
    Silent(usize),
}

fn ending() -> impl Strategy<Value = Ending> {
    prop_oneof![
        3 => Just(Ending::Never),
        1 => any::<u8>().prop_map(Ending::Close),
        1 => (0usize..10).prop_map(Ending::Silent),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(256)))]

    /// Whatever the timing, the pieces, the pipe and the buffer: every caller gets its own
    /// reply or an error, a caller whose whole reply was written gets it unless it gave up
    /// first, and nobody waits forever.
    #[test]
    fn every_caller_gets_its_own_reply_or_an_error(
        callers in callers(),
        pieces in proptest::collection::vec(1usize..40, 0..8),
        pauses in proptest::collection::vec(0u64..6, 0..8),
        ending in ending(),
        pipe in 1usize..64,
        read_buffer in 1usize..48,
    ) {
        let replies: Vec<Vec<u8>> = callers.iter().enumerate().map(|(c, k)| reply_for(c, &k.value)).collect();
        let all: usize = replies.iter().map(Vec::len).sum();
        let script = Script {
            replies: replies.clone(),
            pieces,
            pauses,
            close_at: match ending { Ending::Close(share) => Some(all * usize::from(share) / 256), _ => None },
            silent_after: match ending { Ending::Silent(n) => Some(n), _ => None },
        };
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        let (got, written) = runtime.block_on(async {
            let (conn, written) = connect(script, pipe, read_buffer);
            let handles = callers.iter().enumerate().map(|(c, k)| {
                let patience = k.patience.map_or(PATIENT, Duration::from_millis);
                caller(&conn, c, k.start, patience)
            });
            let got = outcomes(handles.collect()).await;
            let written = written.lock().unwrap().clone();
            (got, written)
        });
        for (c, outcome) in got.iter().enumerate() {
            let whole = written.contains(&c);
            let patient = callers[c].patience.is_none();
            match outcome {
                Outcome::Reply(reply) => prop_assert_eq!(reply, &replies[c], "caller {} got another's reply", c),
                // A write refused by the closed socket breaks the connection, and replies
                // already on their way are lost with it.
                Outcome::Failed(_) => prop_assert!(!whole || matches!(ending, Ending::Close(_)),
                    "caller {} failed though its whole reply was written: {:?}", c, outcome),
                Outcome::TimedOut => prop_assert!(!patient || !whole,
                    "patient caller {} timed out though its whole reply was written", c),
            }
            if matches!(ending, Ending::Never) && patient {
                prop_assert!(matches!(outcome, Outcome::Reply(_)), "caller {}: {:?}", c, outcome);
            }
            // Only a silent server leaves a patient caller to its deadline.
            if !matches!(ending, Ending::Silent(_)) && patient {
                prop_assert!(!matches!(outcome, Outcome::TimedOut), "caller {} waited to its deadline", c);
            }
        }
    }
}
