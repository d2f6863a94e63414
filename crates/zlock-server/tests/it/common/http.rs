//! HTTP/1 over a plain socket for the tests of the admin server and the metrics
//! endpoint: one request per connection (`Connection: close`), its answer read to the
//! end, everything bounded in time.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a connect (retried) or an answer may take.
pub const T: Duration = Duration::from_secs(30);

/// A connection to `addr`, retried for [`T`]: a server binds its HTTP ports once it has
/// started, a moment after its client port.
pub async fn connect(addr: SocketAddr) -> TcpStream {
    let deadline = tokio::time::Instant::now() + T;
    loop {
        match TcpStream::connect(addr).await {
            Ok(s) => return s,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("{addr}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// A request's bytes: `auth` is the `Authorization` header's value; a body goes with
/// its length.
pub fn request(method: &str, path: &str, auth: Option<&str>, body: &[u8]) -> Vec<u8> {
    let auth = auth.map_or(String::new(), |a| format!("Authorization: {a}\r\n"));
    let length = match body.is_empty() {
        true => String::new(),
        false => format!(
            "Content-Type: application/octet-stream\r\nContent-Length: {}\r\n",
            body.len()
        ),
    };
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: zlock\r\n{auth}{length}Connection: close\r\n\r\n"
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// An answer: its status, its head as sent, its body.
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (null if it is none).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Sends `request` to `addr` and reads the whole answer.
pub async fn send(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut s = connect(addr).await;
    s.write_all(request).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut got))
        .await
        .expect("the endpoint answers and closes")
        .unwrap();
    let split = got.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match split {
        Some(i) => (&got[..i], got[i + 4..].to_vec()),
        None => (&got[..], Vec::new()),
    };
    let head = String::from_utf8_lossy(head).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {head:?}"));
    Answer { status, head, body }
}

/// `GET path` with `auth`.
pub async fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Answer {
    send(addr, &request("GET", path, auth, b"")).await
}

/// `POST path` of `body` with `auth`.
pub async fn post(addr: SocketAddr, path: &str, auth: Option<&str>, body: &[u8]) -> Answer {
    send(addr, &request("POST", path, auth, body)).await
}
