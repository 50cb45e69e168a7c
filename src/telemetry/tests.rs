//! The scrape endpoint's answer to one connection: a scrape is answered, and a scraper that is
//! too slow or sends too much is dropped within the deadline.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{answer_scrape, MAX_REQUEST_HEAD};

/// A connected pair on loopback: the client's end and the server's.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let client = TcpStream::connect(listener.local_addr().expect("bound")).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    (client, server)
}

/// Runs `answer_scrape` on `server` on a thread of its own; its result, and how long it took,
/// or `None` if it has not returned after 10 s (a hung answer fails the test, not hangs it).
fn answer_in_background(
    server: TcpStream,
    deadline: Duration,
) -> Option<(std::io::Result<()>, Duration)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let start = Instant::now();
        let result = answer_scrape(server, deadline, || "up 1\n".to_string());
        let _ = tx.send((result, start.elapsed()));
    });
    rx.recv_timeout(Duration::from_secs(10)).ok()
}

#[test]
fn a_get_is_answered_with_the_body_and_the_connection_closed() {
    let (mut client, server) = pair();
    client
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n")
        .expect("send");
    let (result, _) = answer_in_background(server, Duration::from_secs(5)).expect("answered");
    result.expect("no error");
    let mut response = String::new();
    client.read_to_string(&mut response).expect("read");
    assert_eq!(
        response,
        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: 5\r\n\
         connection: close\r\n\r\nup 1\n"
    );
}

#[test]
fn a_scraper_that_trickles_its_request_is_dropped_at_the_deadline() {
    let (mut client, server) = pair();
    // One byte every 20 ms, never the blank line that ends the head: each read waits far less
    // than the deadline, so only a deadline on the whole request ends it.
    std::thread::spawn(move || {
        while client.write_all(b"X").is_ok() {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    let (result, took) =
        answer_in_background(server, Duration::from_millis(300)).expect("returned, not hung");
    let kind = result.expect_err("dropped").kind();
    assert!(
        matches!(
            kind,
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
        ),
        "{kind:?}"
    );
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn a_silent_scraper_is_dropped_at_the_deadline() {
    let (_client, server) = pair();
    let (result, took) =
        answer_in_background(server, Duration::from_millis(200)).expect("returned, not hung");
    assert!(result.is_err());
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

#[test]
fn a_request_head_past_the_limit_is_refused() {
    let (mut client, server) = pair();
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_HEAD));
    std::thread::spawn(move || {
        let _ = client.write_all(long.as_bytes());
        // Kept open until the server gives up.
        let _ = client.read(&mut [0; 1]);
    });
    let (result, _) = answer_in_background(server, Duration::from_secs(5)).expect("returned");
    assert_eq!(
        result.expect_err("refused").kind(),
        std::io::ErrorKind::InvalidData
    );
}
