//! The layer around a tonic server, as the tonic example writes it: a gRPC client sees a denial
//! as `RESOURCE_EXHAUSTED` with `retry-after` in its metadata, each method has its own bucket,
//! and the peer is read from tonic's `TcpConnectInfo` without `.peer(...)`.

use std::sync::Arc;
use std::time::Duration;

use sluice_tower::{FixedWindow, MemoryOptions, MemoryStore, NamedPolicy, RateLimitLayer, SystemClock};
use tonic::Code;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

/// The example's server with 2 calls per (client, method) an hour; its address.
async fn serve() -> String {
    let policy =
        NamedPolicy { name: "per-call".into(), policy: FixedWindow::per(2, Duration::from_secs(3600)).unwrap().into() };
    let store = MemoryStore::new(vec![policy], MemoryOptions::default(), Arc::new(SystemClock::new()));
    let limits = RateLimitLayer::builder(Arc::new(store)).limit("per-call", ["ip", "path"]).build().unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let incoming = TcpIncoming::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = incoming.local_addr().unwrap();
    tokio::spawn(Server::builder().layer(limits).add_service(health).serve_with_incoming(incoming));
    format!("http://{addr}")
}

#[tokio::test]
async fn a_denied_call_is_resource_exhausted_with_its_retry_after_and_each_method_has_its_own_limit() {
    let channel = Channel::from_shared(serve().await).unwrap().connect().await.unwrap();
    let mut client = HealthClient::new(channel);
    // The empty service name is the server's own health: SERVING.
    let check = || HealthCheckRequest { service: String::new() };
    for _ in 0..2 {
        client.check(check()).await.expect("within the limit: the service answers");
    }
    let denied = client.check(check()).await.expect_err("the third call in the hour");
    assert_eq!(denied.code(), Code::ResourceExhausted, "{denied:?}");
    let retry_after: u64 = denied.metadata().get("retry-after").unwrap().to_str().unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry_after), "retry-after {retry_after}");
    assert!(denied.metadata().get("ratelimit-remaining").is_some(), "the rate-limit headers as metadata");
    // Another method of the same service has its own bucket: `Watch` opens its stream.
    let watched = client.watch(check()).await;
    assert!(watched.is_ok(), "another method is limited apart: {watched:?}");
}
