//! Addresses as configuration writes them: listen addresses, and the addresses or CIDR blocks
//! of trusted peers.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use ipnet::IpNet;

use crate::error::{ConfigError, Source};

/// `v`, the `field` of `table`, as a socket address, or the error that names it.
pub(super) fn addr(
    src: &Source<'_>,
    span: &Range<usize>,
    table: &str,
    field: &str,
    v: &str,
) -> Result<SocketAddr, ConfigError> {
    v.parse().map_err(|_| {
        src.error(
            Some(src.field_line(span, field)),
            format!("{table}.{field}"),
            format!("`{v}` is not an address with a port, like `0.0.0.0:8080` or `[::1]:8080`"),
        )
    })
}

/// An address or CIDR block (`10.0.0.0/8`, `192.0.2.7`), its host bits cleared; or why not.
pub(super) fn ip_net(p: &str) -> Result<IpNet, String> {
    p.parse::<IpNet>()
        .or_else(|_| p.parse::<IpAddr>().map(IpNet::from))
        .map(|n| n.trunc())
        .map_err(|_| format!("`{p}` is not an address or CIDR block like `10.0.0.0/8`"))
}
