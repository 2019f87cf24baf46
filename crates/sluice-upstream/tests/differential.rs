//! The same scripted upstream responses read through hyper's HTTP/1 client
//! (`hyper::client::conn::http1`) and through sluice's own exchange: the same status, fields
//! (hyper's after the hop-by-hop ones are removed, as the proxy removes them) and body, or both
//! an error — except where sluice is stricter by design, each case named in [`stricter`].

mod common;

use bytes::Bytes;
use common::{Scripted, Whole, paused, response, script, through_sluice};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use sluice_upstream::hop_by_hop::strip_hop_by_hop;

/// The response to `method` read through hyper's client over `socket`.
async fn through_hyper(method: &str, socket: Scripted) -> Result<Whole, String> {
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(socket))
        .await
        .map_err(|e| e.to_string())?;
    let driven = tokio::spawn(conn);
    let req = http::Request::builder().method(method).uri("/x").header("host", "up").body(Empty::new()).unwrap();
    let res = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let (mut parts, body) = res.into_parts();
    let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes().to_vec();
    strip_hop_by_hop(&mut parts.headers);
    drop(sender);
    let _ = driven.await;
    Ok(Whole { status: parts.status.as_u16(), headers: parts.headers, body })
}

/// Where sluice refuses a response hyper reads, on purpose: why, or `None` when the two must
/// agree. Each is a response whose body a proxy's client could read otherwise than the proxy.
fn stricter(wire: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(wire).to_ascii_lowercase();
    // The final head: interim ones (1xx but 101) are skipped by both.
    let status = |h: &str| h.get(9..12).unwrap_or_default().to_owned();
    let head = text.split("\r\n\r\n").find(|h| !status(h).starts_with('1') || status(h) == "101")?;
    if status(head) == "101" {
        return Some("101 Switching Protocols: sluice never asks for an upgrade, and runs no tunnel");
    }
    let values = |name: &str| -> Vec<String> {
        head.split("\r\n")
            .filter_map(|line| line.strip_prefix(name)?.strip_prefix(':').map(|v| v.trim().to_owned()))
            .collect()
    };
    let (codings, lengths) = (values("transfer-encoding"), values("content-length"));
    if codings.is_empty() {
        return None;
    }
    if !lengths.is_empty() {
        return Some("a Content-Length beside a Transfer-Encoding: the body could be read two ways");
    }
    if codings.join(",") != "chunked" {
        return Some("a coding other than chunked would reach the client still encoded");
    }
    if head.starts_with("http/1.0") {
        return Some("an HTTP/1.0 message with a Transfer-Encoding is misframed (RFC 9112 section 6.1)");
    }
    None
}

async fn compare(method: &str, wire: &[u8], cuts: &[usize]) -> Result<(), String> {
    let ours = through_sluice(method, script(wire, cuts)).await;
    let theirs = through_hyper(method, script(wire, cuts)).await;
    let agree = match (&ours, &theirs) {
        (Ok(a), Ok(b)) => a == b,
        (Err(_), Err(_)) => true,
        (Err(_), Ok(_)) => stricter(wire).is_some(),
        (Ok(_), Err(_)) => false,
    };
    if agree {
        Ok(())
    } else {
        Err(format!("{method} {:?}\n  sluice: {ours:?}\n  hyper:  {theirs:?}", String::from_utf8_lossy(wire)))
    }
}

#[test]
fn known_responses_read_the_same_through_both_clients() {
    let cases: Vec<(&str, &[u8])> = vec![
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Up: 1\r\n\r\nhello"),
        ("GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"),
        ("GET", b"HTTP/1.1 200 OK\r\nX-Up: 1\r\n\r\nall until the close"),
        ("GET", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\ndone"),
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
        ("GET", b"HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n"),
        ("GET", b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\nETag: \"v1\"\r\n\r\n"),
        ("GET", b"HTTP/1.0 200 OK\r\nConnection: keep-alive, X-Hop\r\nKeep-Alive: timeout=5\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\nok"),
        ("GET", b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n"),
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"),
        ("GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"),
        ("GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"),
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 30\r\n\r\nabc"),
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
        ("GET", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz"),
        ("GET", b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
        ("GET", b"<html>not http</html>\r\n\r\n"),
        ("GET", b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n"),
        ("GET", b""),
    ];
    paused(async {
        let mut failures = Vec::new();
        for (method, wire) in cases {
            for cuts in [vec![], vec![1], vec![wire.len() / 2], vec![3, 9, 17, 30]] {
                if let Err(e) = compare(method, wire, &cuts).await {
                    failures.push(e);
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(sluice_core::fuzz_cases(500)))]

    /// Responses of every framing, right or wrong, split anywhere: the same through both
    /// clients, or a refusal of sluice's named in [`stricter`].
    #[test]
    fn generated_responses_read_the_same_through_both_clients(
        (method, wire) in response(),
        cuts in proptest::collection::vec(0..400usize, 0..6),
    ) {
        let compared = paused(compare(&method, &wire, &cuts));
        prop_assert!(compared.is_ok(), "{}", compared.unwrap_err());
    }
}
