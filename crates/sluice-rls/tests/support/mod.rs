//! What the service's tests share: descriptor directories, the service started for real on a
//! loopback port (memory store on a manual clock, or a real `redis-server`), a gRPC client,
//! and requests written as tuples.

#![allow(dead_code)] // each test binary uses part of this module

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::{Clock, ManualClock, NANOS_PER_SEC, SystemClock};
use sluice_gateway::observe::{Observer, ThreadRandom};
use sluice_gateway::stores::{MemoryStores, StoreBuilder};
use sluice_rls::Rls;
use tokio::sync::oneshot;
use tonic::transport::Channel;

#[path = "../../../sluice-redis/tests/support/mod.rs"]
mod redis_support;
pub use redis_support::RedisServer;

/// Which store a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The memory store on a manual clock.
    Memory,
    /// A real `redis-server` started for the test (its own clock).
    Redis,
}

/// A directory of descriptor files, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(files: &[(&str, &str)]) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-rls-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let d = Dir(dir);
        for (name, text) in files {
            d.write(name, text);
        }
        d
    }

    pub fn write(&self, name: &str, text: &str) {
        std::fs::write(self.0.join(name), text).unwrap();
    }

    pub fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The service, serving on a loopback port until dropped.
pub struct Harness {
    pub rls: Arc<Rls>,
    /// The observer its decisions are counted into (its decision log's cap on the test's clock).
    pub observer: Arc<Observer>,
    /// The manual clock of the memory store (None on Redis).
    pub clock: Option<Arc<ManualClock>>,
    pub addr: SocketAddr,
    pub dir: Dir,
    stop: Option<oneshot::Sender<()>>,
    pub redis: Option<RedisServer>,
}

/// A start time well after the epoch, on no window boundary.
pub const START: u64 = 1_700_000_007 * NANOS_PER_SEC + 123_456_789;

impl Harness {
    /// The service over `files`, on `backend`, with `extra` TOML (e.g. `charge = "independent"`
    /// under `[rls]`, or a `[server]` table).
    pub async fn start(backend: Backend, files: &[(&str, &str)], rls_extra: &str, server: &str) -> Harness {
        let dir = Dir::new(files);
        let mut redis = None;
        let store = match backend {
            Backend::Memory => String::new(),
            Backend::Redis => {
                let r = RedisServer::start();
                let s = format!(
                    "[store]\nkind = \"redis\"\nurl = \"{}\"\non_error = \"fail-closed\"\ntimeout_ms = 2000\n",
                    r.url()
                );
                redis = Some(r);
                s
            }
        };
        // A shared store needs the instances' shared key secret.
        let server = match (backend, server.contains("[server]")) {
            (Backend::Memory, _) => server.to_string(),
            (Backend::Redis, true) => {
                server.replacen("[server]", "[server]\nkey_secret = \"the rls tests' shared secret\"", 1)
            }
            (Backend::Redis, false) => format!("[server]\nkey_secret = \"the rls tests' shared secret\"\n{server}"),
        };
        let toml = format!(
            "{server}\n{store}\n[rls]\nlisten = \"127.0.0.1:0\"\ndescriptors = {:?}\n{rls_extra}\n",
            dir.path()
        );
        let config = sluice_config::parse("test.toml", &toml).unwrap();
        let (builder, clock, manual): (Box<dyn StoreBuilder>, Arc<dyn Clock>, _) = match backend {
            Backend::Memory => {
                let c = Arc::new(ManualClock::new(START));
                (Box::new(MemoryStores::new(c.clone())), c.clone(), Some(c))
            }
            Backend::Redis => (sluice_gateway::stores::for_config(&config), Arc::new(SystemClock::new()), None),
        };
        let observer = Arc::new(Observer::with_sources(clock.clone(), Arc::new(ThreadRandom)));
        let rls = Arc::new(Rls::with_observer(&config, builder, clock, observer.clone()).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(sluice_rls::serve(listener, rls.clone(), async move {
            let _ = stopped.await;
        }));
        Harness { rls, observer, clock: manual, addr, dir, stop: Some(stop), redis }
    }

    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::connect(format!("http://{}", self.addr)).await.unwrap()
    }

    /// Advances the manual clock (memory store only).
    pub fn advance(&self, nanos: u64) {
        self.clock.as_ref().expect("a manual clock (memory store)").advance(nanos);
    }

    /// Stops the server (open connections are let finish).
    pub fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A request to `domain` with one descriptor per tuple list, request-level `hits_addend`.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]], hits_addend: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend,
    }
}

pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
        ..Default::default()
    }
}

/// Sends `req`; panics on a transport or service error.
pub async fn call(client: &mut RateLimitServiceClient<Channel>, req: RateLimitRequest) -> RateLimitResponse {
    client.should_rate_limit(req).await.unwrap().into_inner()
}

pub fn code(s: &DescriptorStatus) -> Code {
    Code::try_from(s.code).unwrap()
}

pub fn overall(r: &RateLimitResponse) -> Code {
    Code::try_from(r.overall_code).unwrap()
}

/// `(requests_per_unit, unit name)` of a status's current limit.
pub fn limit_of(s: &DescriptorStatus) -> Option<(u32, &'static str)> {
    s.current_limit.as_ref().map(|l| {
        let unit =
            envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit::try_from(l.unit)
                .unwrap()
                .as_str_name();
        (l.requests_per_unit, unit)
    })
}

/// On Redis (real time), waits out the end of a window of `unit_secs` when it is under
/// `margin_secs` away, so that a sequence of requests stays in one window. A guard on the
/// test's own pace, not a timed assertion.
pub async fn away_from_boundary(backend: Backend, unit_secs: u64, margin_secs: u64) {
    if backend != Backend::Redis {
        return;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let into = now.as_nanos() as u64 % (unit_secs * NANOS_PER_SEC);
    let left = unit_secs * NANOS_PER_SEC - into;
    if left < margin_secs * NANOS_PER_SEC {
        tokio::time::sleep(std::time::Duration::from_nanos(left + NANOS_PER_SEC / 10)).await;
    }
}

/// A value no earlier test run used (Redis state outlives nothing here, but keys must differ
/// between the sequences of one test).
pub fn fresh(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("{tag}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::SeqCst))
}

/// Runs each named `async fn(Backend)` as two tests, `memory::NAME` and `redis::NAME` (the
/// latter starts `redis-server`, so only with the `external-programs` feature).
#[allow(unused_macros)]
macro_rules! on_both_stores {
    ($($name:ident),*) => {
        mod memory {
            $( #[tokio::test] async fn $name() { super::$name(super::Backend::Memory).await; } )*
        }
        #[cfg(feature = "external-programs")]
        mod redis {
            $( #[tokio::test] async fn $name() { super::$name(super::Backend::Redis).await; } )*
        }
    };
}
