//! Slow and idle clients against the daemon's real listener (paused time: the deadlines pass
//! without anyone waiting for them): a request head or body that drips is cut off at its
//! deadline, connections over the cap are refused at once, and an honest client is still
//! served while a slowloris crowd holds every other socket.

mod common;

use std::time::Duration;

use keel_server::ConnectionLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMITS: ConnectionLimits = ConnectionLimits {
    max_connections: 64,
    header_timeout: Duration::from_secs(10),
    body_timeout: Duration::from_secs(30),
};

/// A daemon on a real port, and a key of user `ann`.
async fn daemon() -> (
    std::net::SocketAddr,
    String,
    tokio::sync::oneshot::Sender<()>,
) {
    let (state, key) = common::state().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(keel_server::serve::serve(listener, state, LIMITS, async {
        let _ = stop_rx.await;
    }));
    (address, key, stop_tx)
}

/// Everything the server sends until it closes the connection.
async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// One whole request on a fresh connection; the answer's status line.
async fn health(address: std::net::SocketAddr) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: keel\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    read_to_close(&mut stream)
        .await
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn a_slowloris_crowd_is_refused_over_the_cap_and_cut_off_at_the_head_deadline() {
    let (address, _, _stop) = daemon().await;
    // 64 connections each send half a request head and stop; 1,436 more find the cap.
    let mut slow = Vec::new();
    for _ in 0..LIMITS.max_connections {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: ke")
            .await
            .unwrap();
        slow.push(stream);
    }
    // Let the server take them all before the next ones arrive.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = tokio::time::Instant::now();
    for _ in 0..1_436 {
        let mut extra = TcpStream::connect(address).await.unwrap();
        let answer = read_to_close(&mut extra).await;
        assert!(
            answer.starts_with("HTTP/1.1 503") && answer.contains("retry-after: 1"),
            "over the cap: {answer}"
        );
    }
    assert!(started.elapsed() < LIMITS.header_timeout, "refused at once");
    // Each slow client is cut off at the head deadline, and its place is free again.
    for mut stream in slow {
        let _ = tokio::time::timeout(LIMITS.header_timeout * 2, read_to_close(&mut stream))
            .await
            .expect("a half-sent head is cut off at its deadline");
    }
    assert_eq!(health(address).await, "HTTP/1.1 200 OK");
}

#[tokio::test(start_paused = true)]
async fn an_idle_keep_alive_connection_is_closed_at_the_head_deadline() {
    let (address, _, _stop) = daemon().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: keel\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    stream.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let started = tokio::time::Instant::now();
    tokio::time::timeout(LIMITS.header_timeout * 2, read_to_close(&mut stream))
        .await
        .expect("an idle connection is closed");
    assert!(started.elapsed() >= LIMITS.header_timeout);
}

#[tokio::test(start_paused = true)]
async fn a_body_that_drips_is_refused_408_at_its_deadline() {
    let (address, key, _stop) = daemon().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST /v1/conversations HTTP/1.1\r\nhost: keel\r\nauthorization: Bearer {key}\r\n\
         content-type: application/json\r\ncontent-length: 1000\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // One byte every five seconds keeps a per-read timeout happy; the body's deadline is whole.
    let dripping = async {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            if stream.write_all(b" ").await.is_err() {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(LIMITS.body_timeout + Duration::from_secs(1), dripping).await;
    let answer = tokio::time::timeout(Duration::from_secs(5), read_to_close(&mut stream))
        .await
        .expect("the server answers and closes");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"request_timeout\""), "{answer}");
    assert_eq!(health(address).await, "HTTP/1.1 200 OK");
}

#[tokio::test(start_paused = true)]
async fn stopping_closes_idle_connections_and_returns() {
    let (address, _, stop) = daemon().await;
    let mut idle = TcpStream::connect(address).await.unwrap();
    assert_eq!(health(address).await, "HTTP/1.1 200 OK");
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), read_to_close(&mut idle))
        .await
        .expect("an idle connection is closed at shutdown");
}
