//! The proxy's own HTTP/1.1 client for requests without a body: one write of the request head,
//! the response head parsed from the bytes read, the body decoded as it streams to the client.
//!
//! hyper's client runs each connection as a task of its own and hands every request to it and
//! every response back through channels; a proxied GET cost about 14,500 instructions there, most
//! of the proxy's gap to nginx. A request without a body needs none of that machinery: the task
//! that serves the client writes the head and reads the response itself. Requests with a body
//! still go through hyper, which writes the body while it reads an early response.
//!
//! The rules that keep the proxy from being desynchronised from its upstream live here, in one
//! place each:
//! - [`response_head`]: a response is framed once. A `Content-Length` must be one decimal number
//!   (repeated values must agree); `Transfer-Encoding` must be exactly `chunked`; both at once,
//!   a `101` (sluice never asks to switch protocols) or a malformed head are a 502, and the
//!   connection is closed. The head is bounded ([`response_head::MAX_HEAD`] bytes,
//!   [`response_head::MAX_FIELDS`] fields); `1xx` interim responses are skipped.
//! - [`body_decoder`]: a body ends where its framing says. A chunk-size line and the trailers are
//!   bounded; bytes after the end of a response, a connection that ends inside a body, or a
//!   framing error close the connection (a body cut short reaches the client as a cut
//!   connection, never as a complete response).
//! - [`request_head`]: the request is written from a parsed request (names, values, method and
//!   target validated by `http`), so no field can carry a line break to the upstream.
//! - [`connection`]: over any [`crate::socket::Socket`], a connection is reused only after a
//!   response that allows it (HTTP/1.1, no `Connection: close`, framed by length or chunks)
//!   ended exactly at its last byte; an idle
//!   connection that the upstream closed or wrote to is noticed before it is used again (and
//!   closed within a second by each worker's sweep, traffic or not), and a request it loses
//!   before any byte of a response comes back is sent once more on a new connection when its
//!   method is safe (`GET`, `HEAD`, `OPTIONS`, `TRACE`).
//!
//! What is left: bytes an upstream sends unasked on an idle connection are seen through the
//! runtime's readiness, so bytes that arrive after a response ended but before the runtime polled
//! for events could be read as the next request's response (hyper's client had the same window;
//! closing it would cost a system call per request). Trailers are not passed on, and a response
//! head is bounded at 64 KiB (hyper allowed about 400 KiB).
//!
//! `tests/differential.rs` reads the same scripted responses through hyper's client: the two
//! agree, except where sluice refuses on purpose (a `Content-Length` beside a
//! `Transfer-Encoding`, a coding other than `chunked`, a `Transfer-Encoding` in HTTP/1.0, an
//! unasked `101`).

pub mod body_decoder;
pub mod connection;
pub mod request_head;
pub mod response_head;
