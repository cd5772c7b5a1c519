//! A TCP fault proxy in front of a server, for connection faults the HTTP layer cannot make:
//! per connection, pass it through, or let the server execute the request and then lose the
//! response, by a reset (RST) or by holding the connection silent until the client times out.
//!
//! Both faults forward the request first and wait for the server's first bytes back, so the
//! request was executed: exactly the case where repeating a non-idempotent request duplicates
//! its effect.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the proxy does to each connection.
#[derive(Clone, Copy, Debug)]
pub struct ConnectionFaults {
    /// Share of connections reset after the request was executed, before the response.
    pub reset: f64,
    /// Share of connections whose response never comes (held open for `hold`).
    pub silent: f64,
    /// How long a silent connection is held; longer than the clients' attempt timeout.
    pub hold: Duration,
}

/// What the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections passed through.
    pub passed: AtomicU64,
    /// Connections reset after the request was executed.
    pub reset: AtomicU64,
    /// Connections left silent after the request was executed.
    pub silent: AtomicU64,
}

#[derive(Clone, Copy)]
enum Mode {
    Pass,
    Reset,
    Silent,
}

/// Listens on `127.0.0.1:0` in front of `upstream`; returns its address and its counters.
pub async fn start_proxy(
    upstream: SocketAddr,
    faults: ConnectionFaults,
    seed: u64,
) -> (SocketAddr, Arc<ProxyStats>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let stats = Arc::new(ProxyStats::default());
    let rng = Mutex::new(SmallRng::seed_from_u64(seed));
    let counters = stats.clone();
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                continue;
            };
            let x: f64 = rng.lock().expect("rng").gen();
            let (mode, counter) = if x < faults.reset {
                (Mode::Reset, &counters.reset)
            } else if x < faults.reset + faults.silent {
                (Mode::Silent, &counters.silent)
            } else {
                (Mode::Pass, &counters.passed)
            };
            // Relaxed: a counter read after the run, no other memory depends on it.
            counter.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let _ = handle(conn, upstream, mode, faults.hold).await;
            });
        }
    });
    (addr, stats)
}

async fn handle(
    mut client: TcpStream,
    upstream: SocketAddr,
    mode: Mode,
    hold: Duration,
) -> std::io::Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    if let Mode::Pass = mode {
        tokio::io::copy_bidirectional(&mut client, &mut server).await?;
        return Ok(());
    }
    // The storm's requests have no body: the head is the whole request.
    let head = read_head(&mut client).await?;
    server.write_all(&head).await?;
    let mut buf = [0u8; 1024];
    // The server answered: it executed the request.
    let _ = server.read(&mut buf).await?;
    match mode {
        Mode::Reset => client.set_zero_linger()?, // dropped below: RST instead of FIN
        _ => {
            // Silent until the client gives up (closes) or `hold` passes.
            let _ = tokio::time::timeout(hold, client.read(&mut buf)).await;
        }
    }
    Ok(())
}

/// Reads up to and including the blank line that ends a request head (at most 64 KiB).
async fn read_head(client: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = client.read(&mut buf).await?;
        if n == 0 || head.len() > 64 * 1024 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(head)
}
