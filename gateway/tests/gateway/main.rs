//! The demo gateway on loopback: its admin routes, its listener under a flood, its state across
//! a restart, its answers over TCP, and the observability files (dashboard, alert rules) it is
//! measured by.

mod admin_routes;
mod flood;
mod listener;
mod observability_files;
mod state;
mod tcp;
