//! Plain HTTP/1.0 to an endpoint on this machine: the manager's and the peers' `/metrics`
//! and `/readyz`. No client library: the benchmarks must not add load of their own.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpStream},
    time::Duration,
};

/// `GET path` over HTTP/1.0; the body when the answer is 200.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.split_whitespace()
        .nth(1)
        .is_some_and(|s| s == "200")
        .then(|| body.to_string())
}

/// [`http_get`] off the async workers, so that a slow answer never delays a watch, and its
/// body through `parse`.
pub async fn get_parsed<T, F>(addr: SocketAddr, path: &'static str, parse: F) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce(&str) -> T + Send + 'static,
{
    tokio::task::spawn_blocking(move || http_get(addr, path).map(|body| parse(&body)))
        .await
        .ok()
        .flatten()
}
