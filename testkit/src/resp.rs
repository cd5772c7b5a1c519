//! A tiny RESP client for looking at what the limiter left in a test's server, and the port
//! and install helpers every harness server starts with.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The clock (`TIME`) of the server on `port`, in microseconds since the Unix epoch.
pub fn time_micros_at(port: u16) -> u64 {
    let time = cmd_at(port, &["TIME"]).expect("redis TIME");
    let mut parts = time
        .lines()
        .map(|p| p.parse::<u64>().expect("TIME's two integers"));
    parts.next().expect("seconds") * 1_000_000 + parts.next().expect("microseconds")
}

/// Runs one command on the server at 127.0.0.1:`port`; the reply flattened to strings (arrays
/// one element a line), an error reply as an error.
pub fn cmd_at(port: u16, args: &[&str]) -> std::io::Result<String> {
    let out = bytes_at(port, args)?;
    let out: Vec<String> = out
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    Ok(out.join("\n"))
}

/// [`cmd_at`]'s reply as it came: one byte string per element (none for a nil).
pub fn bytes_at(port: u16, args: &[&str]) -> std::io::Result<Vec<Vec<u8>>> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req += &format!("${}\r\n{a}\r\n", a.len());
    }
    s.write_all(req.as_bytes())?;
    let mut r = BufReader::new(s);
    let mut out = Vec::new();
    read_reply(&mut r, &mut out)?;
    Ok(out)
}

/// A free loopback port (bound, then released: the caller binds it soon after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Panics, saying how to install it, when `binary` (`redis-server`, `redis-cli`) cannot start.
pub fn missing(binary: &str, e: std::io::Error) -> ! {
    panic!(
        "cannot start {binary} ({e}): the Redis tests need `redis-server` and `redis-cli` on \
         PATH. Install them with `apt-get install redis-server` (Debian/Ubuntu; it brings \
         redis-tools) or `brew install redis`, and stop any system instance it starts \
         (`service redis-server stop`)."
    )
}

fn read_reply(r: &mut impl BufRead, out: &mut Vec<Vec<u8>>) -> std::io::Result<()> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let line = line.trim_end_matches("\r\n");
    let (kind, rest) = line.split_at(1.min(line.len()));
    match kind {
        "+" | ":" => out.push(rest.as_bytes().to_vec()),
        "-" => {
            return Err(std::io::Error::other(format!("redis error: {rest}")));
        }
        "$" => {
            let n: i64 = rest.parse().map_err(std::io::Error::other)?;
            if n >= 0 {
                let mut buf = vec![0; n as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(n as usize);
                out.push(buf);
            }
        }
        "*" => {
            let n: i64 = rest.parse().map_err(std::io::Error::other)?;
            for _ in 0..n.max(0) {
                read_reply(r, out)?;
            }
        }
        _ => return Err(std::io::Error::other(format!("bad reply: {line:?}"))),
    }
    Ok(())
}
