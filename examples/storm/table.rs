//! The table of one scenario: a row per client.

use crate::scenario::{Client, Run};
use crate::storm::{Outcome, Report};

/// The markdown table of `run`, a row for the naive client and one for the SDK client, then the
/// scenario's notes.
pub fn table(run: &Run) -> String {
    let mut out = String::from(
        "| client | logical | attempts | amplification | 429s | 503s | lost | eventual success | abandoned | time to recover | wait p50 | wait p99 |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n",
    );
    out += &row(Client::Naive.name(), &run.naive);
    out += &row(Client::Sdk.name(), &run.sdk);
    if let Some(c) = &run.control {
        out += &row(Client::SdkNoJitter.name(), c);
    }
    for note in run.notes() {
        out += &format!("\n- {note}");
    }
    out.push('\n');
    out
}

fn row(name: &str, r: &Report) -> String {
    let abandoned: Vec<String> = r
        .abandoned()
        .iter()
        .map(|(k, n)| format!("{k}: {n}"))
        .collect();
    format!(
        "| {name} | {} | {} | {:.2} | {} | {} | {} | {:.1}% | {} | {:.2} s | {:.2} s | {:.2} s |\n",
        r.logical.len(),
        r.attempts(),
        r.amplification(),
        r.count(Outcome::Throttled),
        r.count(Outcome::Unavailable),
        r.count(Outcome::Lost),
        r.success() * 100.0,
        if abandoned.is_empty() {
            "-".to_owned()
        } else {
            abandoned.join(", ")
        },
        r.time_to_recover().as_secs_f64(),
        r.wait_quantile(0.5).as_secs_f64(),
        r.wait_quantile(0.99).as_secs_f64(),
    )
}
