//! Load on the rate-limit service's gRPC listener from a Rust client (tonic, many concurrent
//! requests over a few HTTP/2 connections, same machine), beside the same client against a
//! tonic server that answers a constant response: the ceiling. Prints decisions per second,
//! p99 latency and the ratio. Run by `bench/rls.sh`; for the record, not in tests.
//!
//! Environment: `RLS_BENCH_SECONDS` (default 5), `RLS_BENCH_CONCURRENCY` (64),
//! `RLS_BENCH_CONNECTIONS` (4), `RLS_BENCH_KEYS` (10000).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::transport::Channel;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The ceiling: answers OK with one status, whatever it is asked.
struct Constant;

#[tonic::async_trait]
impl RateLimitService for Constant {
    async fn should_rate_limit(
        &self,
        _: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![DescriptorStatus { code: Code::Ok as i32, limit_remaining: 1, ..Default::default() }],
            ..Default::default()
        }))
    }
}

/// Decisions per second and p99 of `concurrency` tasks calling `addr` for `secs`.
async fn load(addr: SocketAddr, secs: u64, concurrency: u64, connections: u64, keys: u64) -> (f64, Duration) {
    let mut channels = Vec::new();
    for _ in 0..connections {
        channels.push(Channel::from_shared(format!("http://{addr}")).unwrap().connect().await.unwrap());
    }
    let until = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let mut client = RateLimitServiceClient::new(channels[(t % connections) as usize].clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut i = t;
            while Instant::now() < until {
                let entry = Entry { key: "user".into(), value: (i % keys).to_string() };
                let req = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor { entries: vec![entry], ..Default::default() }],
                    hits_addend: 1,
                };
                let sent = Instant::now();
                client.should_rate_limit(req).await.expect("the server answers");
                latencies.push(sent.elapsed());
                i += concurrency;
            }
            latencies
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let p99 = all.get(all.len() * 99 / 100).copied().unwrap_or_default();
    (all.len() as f64 / elapsed, p99)
}

fn main() {
    let secs = env("RLS_BENCH_SECONDS", 5);
    let concurrency = env("RLS_BENCH_CONCURRENCY", 64);
    let connections = env("RLS_BENCH_CONNECTIONS", 4).max(1);
    let keys = env("RLS_BENCH_KEYS", 10_000).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let dir = std::env::temp_dir().join(format!("sluice-rls-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("bench.yaml"),
            "domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 4000000000\n",
        )
        .unwrap();
        let config = sluice_config::parse("bench.toml", &format!("[rls]\ndescriptors = {:?}\n", dir.display().to_string()))
            .unwrap();
        let rls = Arc::new(sluice_rls::Rls::from_config(&config).unwrap());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let sluice_addr = listener.local_addr().unwrap();
        tokio::spawn(sluice_rls::serve(listener, rls, std::future::pending()));

        let constant_addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        tokio::spawn(tonic::transport::Server::builder().add_service(RateLimitServiceServer::new(Constant)).serve(constant_addr));
        tokio::time::sleep(Duration::from_millis(200)).await;

        println!("rls load: {secs} s per case, {concurrency} concurrent requests over {connections} connections, {keys} keys");
        let (ceiling, ceiling_p99) = load(constant_addr, secs, concurrency, connections, keys).await;
        println!("constant tonic server: {ceiling:>10.0} decisions/s  p99 {ceiling_p99:?}");
        let (rate, p99) = load(sluice_addr, secs, concurrency, connections, keys).await;
        println!("sluice rls (memory):   {rate:>10.0} decisions/s  p99 {p99:?}");
        println!("ratio: {:.2}x the ceiling", rate / ceiling);
        let _ = std::fs::remove_dir_all(&dir);
    });
}
