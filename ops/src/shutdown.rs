//! When to stop: the first `SIGTERM` or ctrl-c (a service finishes its requests in flight, then
//! saves its state); a second one ends the process at once, for an operator who will not wait.

use tokio::signal::unix::{signal, SignalKind};

/// Completes on the first `SIGTERM` or ctrl-c; after it, another one exits the process.
pub async fn terminated() {
    let mut term = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: finishing requests in flight"),
        _ = tokio::signal::ctrl_c() => tracing::info!("ctrl-c: finishing requests in flight"),
    }
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::warn!("second signal: exiting now");
        std::process::exit(130);
    });
}
