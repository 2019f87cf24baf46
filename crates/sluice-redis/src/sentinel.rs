//! Redis Sentinel: which node is the primary, asked of the Sentinels by a watcher task per store.
//!
//! The watcher asks every Sentinel at once (`SENTINEL master NAME`) every [`WATCH_INTERVAL`],
//! and sooner when a call to the primary failed (the connector [`Sentinels::forget`]s it:
//! refused, reset, timed out, `READONLY`), but never twice within [`LOOKUP_INTERVAL`]. Of the
//! answers that came within [`GRACE`] of the first, it takes the one of the highest
//! configuration epoch: the Sentinels that already know of a failover win over those that do
//! not yet, and a Sentinel that is down or hangs costs nothing while another answers. A new
//! primary bumps the [generation](Sentinels::generation): the connector drops connections made
//! to an older one when it next hands them out, so a planned failover (`SENTINEL FAILOVER`, or
//! a partition that leaves the old primary up and writable for a while) is followed within a
//! watch interval without any call failing. The watcher keeps one lean connection per Sentinel,
//! and gives a Sentinel the URLs' user and password only when it asks (`NOAUTH`): they are the
//! primary's, and a Sentinel without a password of its own refuses `AUTH`.
//!
//! The primary itself is reached over lean connections like a single node, each new one
//! confirmed with `ROLE` first (`connection.rs`): a decision's path gains one atomic read, the
//! generation its connection was made under.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Poll;
use std::time::Duration;

use redis::{Client, ConnectionAddr, ErrorKind, RedisConnectionInfo, RedisError, RedisResult, Value};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::RedisStoreError;
use crate::lean::LeanConn;

/// The shortest time between two rounds of asking the Sentinels.
pub(crate) const LOOKUP_INTERVAL: Duration = Duration::from_millis(100);
/// How often the Sentinels are asked while every call succeeds.
pub(crate) const WATCH_INTERVAL: Duration = Duration::from_millis(500);
/// How long a round waits for the other Sentinels once one has answered.
pub(crate) const GRACE: Duration = Duration::from_millis(100);
/// The longest a round waits for a first answer.
const ROUND_LIMIT: Duration = Duration::from_secs(2);

/// A primary's address: host and port.
pub(crate) type Address = (String, u16);

/// The Sentinels of one primary, what they last said, and the task that asks them.
pub(crate) struct Sentinels {
    shared: Arc<Shared>,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    /// The name the Sentinels monitor the primary by.
    master: String,
    /// Each Sentinel's host and port.
    at: Vec<Address>,
    /// The primary's user, password and database (from the URLs, which must agree on them).
    redis: RedisConnectionInfo,
    known: Mutex<Known>,
    /// Bumped, under `known`'s lock, whenever the primary named changes.
    generation: AtomicU64,
    /// A round ended.
    answered: Notify,
    /// A call to the primary failed: ask again soon.
    wake: Notify,
}

#[derive(Default)]
struct Known {
    /// The primary last named, and its configuration epoch.
    primary: Option<(Address, u64)>,
    /// Why the last round named none.
    error: Option<String>,
}

fn bad_url(url: &str, reason: String) -> RedisStoreError {
    RedisStoreError::BadUrl { url: url.to_string(), reason }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain data, each field written whole: no invariant a panic could break.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sentinels {
    /// Parses the Sentinels' URLs; connects nothing and starts nothing yet.
    pub fn new(master: &str, urls: &[String]) -> Result<Self, RedisStoreError> {
        let mut at = Vec::with_capacity(urls.len());
        let mut redis: Option<RedisConnectionInfo> = None;
        for url in urls {
            let info =
                Client::open(url.as_str()).map_err(|e| bad_url(url, e.to_string()))?.get_connection_info().clone();
            let ConnectionAddr::Tcp(host, port) = info.addr else {
                return Err(bad_url(url, "a Sentinel is reached over TCP (redis://host:port)".into()));
            };
            match &redis {
                Some(first)
                    if (&first.username, &first.password, first.db)
                        != (&info.redis.username, &info.redis.password, info.redis.db) =>
                {
                    let why = "every Sentinel URL must carry the same user, password and database: the primary's";
                    return Err(bad_url(url, why.into()));
                }
                Some(_) => {}
                None => redis = Some(info.redis),
            }
            at.push((host, port));
        }
        let shared = Shared {
            master: master.to_string(),
            at,
            redis: redis.unwrap_or_default(),
            known: Mutex::default(),
            generation: AtomicU64::new(0),
            answered: Notify::new(),
            wake: Notify::new(),
        };
        Ok(Self { shared: Arc::new(shared), watcher: Mutex::new(None) })
    }

    /// The primary's user, password and database.
    pub fn redis(&self) -> &RedisConnectionInfo {
        &self.shared.redis
    }

    /// Changes whenever the Sentinels name another primary: a connection made under an older
    /// generation is to a node that is no longer the primary.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// The primary the Sentinels name, and its generation; the first call waits for the first
    /// round of asking them (within the caller's own timeout).
    pub async fn primary(&self) -> RedisResult<(Address, u64)> {
        self.watch();
        let shared = &self.shared;
        loop {
            let mut answered = std::pin::pin!(shared.answered.notified());
            answered.as_mut().enable();
            {
                let known = lock(&shared.known);
                if let Some((primary, _)) = &known.primary {
                    return Ok((primary.clone(), shared.generation.load(Ordering::Acquire)));
                }
                if let Some(why) = &known.error {
                    return Err(RedisError::from((ErrorKind::MasterNameNotFoundBySentinel, "sentinel", why.clone())));
                }
            }
            answered.await;
        }
    }

    /// A call to the primary failed: the watcher asks the Sentinels again soon.
    pub fn forget(&self) {
        self.shared.wake.notify_one();
    }

    /// Starts the watcher on the calling runtime unless it runs.
    fn watch(&self) {
        let mut watcher = lock(&self.watcher);
        if watcher.as_ref().is_none_or(JoinHandle::is_finished) {
            *watcher = Some(tokio::spawn(watch(Arc::downgrade(&self.shared))));
        }
    }
}

impl Drop for Sentinels {
    fn drop(&mut self) {
        if let Some(watcher) = lock(&self.watcher).take() {
            watcher.abort();
        }
    }
}

/// Asks the Sentinels in rounds until the store is gone.
async fn watch(shared: Weak<Shared>) {
    let mut conns: Vec<Option<LeanConn>> = Vec::new();
    while let Some(shared) = shared.upgrade() {
        conns.resize_with(shared.at.len(), || None);
        shared.round(&mut conns).await;
        shared.answered.notify_waiters();
        tokio::time::sleep(LOOKUP_INTERVAL).await;
        let _ = tokio::time::timeout(WATCH_INTERVAL - LOOKUP_INTERVAL, shared.wake.notified()).await;
    }
}

impl Shared {
    /// Asks every Sentinel and keeps the primary of the highest epoch among the answers.
    async fn round(&self, conns: &mut [Option<LeanConn>]) {
        let asked = conns.iter_mut().zip(&self.at).map(|(conn, (host, port))| self.ask(conn, host, *port)).collect();
        let answers = gather(asked, GRACE, ROUND_LIMIT).await;
        // A Sentinel that did not answer in time had its question dropped half-way: its
        // connection is made anew next round, not left holding the abandoned request.
        for (conn, answer) in conns.iter_mut().zip(&answers) {
            if answer.is_none() {
                *conn = None;
            }
        }
        let best =
            answers.iter().filter_map(|a| a.as_ref()?.as_ref().ok()).fold(None, |best: Option<&(Address, u64)>, a| {
                if best.is_some_and(|b| b.1 >= a.1) { best } else { Some(a) }
            });
        let mut known = lock(&self.known);
        match best {
            // An answer older than the primary known (a Sentinel that has not yet seen a
            // failover answered alone) never takes sluice back to the old primary.
            Some((_, epoch)) if known.primary.as_ref().is_some_and(|(_, known)| known > epoch) => {
                known.error = None;
            }
            Some((primary, epoch)) => {
                if known.primary.as_ref().is_none_or(|(p, _)| p != primary) {
                    self.generation.fetch_add(1, Ordering::AcqRel);
                }
                known.primary = Some((primary.clone(), *epoch));
                known.error = None;
            }
            None => {
                let why: Vec<String> = self
                    .at
                    .iter()
                    .zip(&answers)
                    .map(|((host, port), a)| match a {
                        Some(Err(e)) => format!("{host}:{port}: {e}"),
                        _ => format!("{host}:{port}: no answer within {} ms", ROUND_LIMIT.as_millis()),
                    })
                    .collect();
                known.error = Some(format!("no Sentinel named the primary {:?} ({})", self.master, why.join("; ")));
            }
        }
    }

    /// One Sentinel's answer, on its connection (made first if there is none or it failed): the
    /// primary's address and configuration epoch.
    async fn ask(&self, conn: &mut Option<LeanConn>, host: &str, port: u16) -> RedisResult<(Address, u64)> {
        if conn.as_ref().is_none_or(LeanConn::is_broken) {
            *conn = Some(LeanConn::connect(host, port).await?);
        }
        let Some(c) = conn.as_ref() else { unreachable!("connected above") };
        let answer = self.question(c).await;
        if answer.is_err() {
            *conn = None;
        }
        answer
    }

    async fn question(&self, conn: &LeanConn) -> RedisResult<(Address, u64)> {
        let mut question = redis::cmd("SENTINEL");
        question.arg("master").arg(&self.master);
        let reply = match query(conn, &question).await {
            Err(e) if e.code() == Some("NOAUTH") => {
                let mut auth = redis::cmd("AUTH");
                if let Some(user) = &self.redis.username {
                    auth.arg(user);
                }
                query(conn, auth.arg(self.redis.password.as_deref().unwrap_or_default())).await?;
                query(conn, &question).await
            }
            other => other,
        };
        let reply = reply.map_err(|e| match e.detail() {
            Some(d) if d.contains("No such master") => {
                let why = format!("monitors no primary named {:?}", self.master);
                RedisError::from((ErrorKind::MasterNameNotFoundBySentinel, "sentinel", why))
            }
            _ => e,
        })?;
        let Value::Array(fields) = &reply else {
            return Err(RedisError::from((ErrorKind::ParseError, "sentinel", format!("unexpected reply {reply:?}"))));
        };
        let field = |name: &str| {
            fields.chunks(2).find_map(|kv| match kv {
                [Value::BulkString(k), Value::BulkString(v)] if k == name.as_bytes() => {
                    std::str::from_utf8(v).ok().map(str::to_string)
                }
                _ => None,
            })
        };
        match (field("ip"), field("port").and_then(|p| p.parse().ok()), field("config-epoch")) {
            (Some(ip), Some(port), epoch) => Ok(((ip, port), epoch.and_then(|e| e.parse().ok()).unwrap_or(0))),
            _ => Err(RedisError::from((ErrorKind::ParseError, "sentinel", "no ip and port in SENTINEL MASTER".into()))),
        }
    }
}

/// One command on a lean connection, written and read by redis-rs; an error reply is `Err`.
async fn query(conn: &LeanConn, cmd: &redis::Cmd) -> RedisResult<Value> {
    crate::connection::lean_query(conn, cmd).await?.extract_error()
}

/// Polls every future on the calling task until all are done, or `grace` after the first
/// success, or `limit` after the start: each one's output, `None` for those not done by then.
async fn gather<T, F: Future<Output = RedisResult<T>>>(
    futures: Vec<F>,
    grace: Duration,
    limit: Duration,
) -> Vec<Option<RedisResult<T>>> {
    let mut pending: Vec<Option<Pin<Box<F>>>> = futures.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut done: Vec<Option<RedisResult<T>>> = pending.iter().map(|_| None).collect();
    let mut limit = Box::pin(tokio::time::sleep(limit));
    let mut grace_ends: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| {
        for (slot, out) in pending.iter_mut().zip(done.iter_mut()) {
            if let Some(f) = slot
                && let Poll::Ready(result) = f.as_mut().poll(cx)
            {
                if result.is_ok() && grace_ends.is_none() {
                    grace_ends = Some(Box::pin(tokio::time::sleep(grace)));
                }
                *out = Some(result);
                *slot = None;
            }
        }
        let grace_over = grace_ends.as_mut().is_some_and(|g| g.as_mut().poll(cx).is_ready());
        if pending.iter().all(Option::is_none) || grace_over || limit.as_mut().poll(cx).is_ready() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_urls_must_agree_on_the_primarys_credentials() {
        let urls = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let s =
            Sentinels::new("m", &urls(&["redis://:pw@127.0.0.1:26379/2", "redis://:pw@127.0.0.1:26380/2"])).unwrap();
        assert_eq!((s.redis().password.as_deref(), s.redis().db), (Some("pw"), 2));
        assert_eq!(s.shared.at, [("127.0.0.1".to_string(), 26379), ("127.0.0.1".to_string(), 26380)]);
        let differ = Sentinels::new("m", &urls(&["redis://:pw@127.0.0.1:26379", "redis://127.0.0.1:26380"]));
        assert!(matches!(differ.err(), Some(RedisStoreError::BadUrl { reason, .. }) if reason.contains("same user")));
        let socket = Sentinels::new("m", &urls(&["redis+unix:///sentinel.sock"]));
        assert!(matches!(socket.err(), Some(RedisStoreError::BadUrl { reason, .. }) if reason.contains("TCP")));
    }

    #[tokio::test]
    async fn nothing_answering_is_an_error_naming_every_sentinel() {
        // Port 1: nothing listens there.
        let s = Sentinels::new("m", &["redis://127.0.0.1:1".to_string(), "redis://127.0.0.1:1".to_string()]).unwrap();
        let e = s.primary().await.unwrap_err().to_string();
        assert!(e.contains("no Sentinel named the primary \"m\"") && e.matches("127.0.0.1:1:").count() == 2, "{e}");
        assert_eq!(s.generation(), 0, "no primary was named");
        let watcher = lock(&s.watcher).take().unwrap();
        assert!(!watcher.is_finished(), "the watcher goes on asking");
        watcher.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_takes_what_came_within_the_grace_after_the_first_answer() {
        let fail = |what: &str| RedisError::from((ErrorKind::IoError, "test", what.to_string()));
        let after = |ms: u64, result: RedisResult<u8>| async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            result
        };
        let limit = Duration::from_secs(2);
        let got = |r: &[Option<RedisResult<u8>>]| {
            r.iter().map(|a| a.as_ref().map(|a| a.as_ref().map_err(|e| e.to_string()).copied())).collect::<Vec<_>>()
        };
        // An error, an answer, another within the grace, one too late.
        let answers =
            gather(vec![after(5, Err(fail("a"))), after(10, Ok(1)), after(60, Ok(2)), after(500, Ok(3))], GRACE, limit)
                .await;
        let shown = got(&answers);
        assert!(matches!(shown[0], Some(Err(_))));
        assert_eq!(&shown[1..], [Some(Ok(1)), Some(Ok(2)), None]);
        // Errors alone: every one is waited for, up to the limit.
        let answers = gather(vec![after(5, Err(fail("a"))), after(3_000, Ok(1))], GRACE, limit).await;
        assert!(matches!(got(&answers)[..], [Some(Err(_)), None]));
    }
}
