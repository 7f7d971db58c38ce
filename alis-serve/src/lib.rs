//! A real serving loop for ALIS on loopback: S shard-server processes holding embedding rows, a router that
//! replays a request stream with real RPCs (one per server a request touches: its fanout), and a strategy
//! of the `alis` crate re-placing rows after every window while the rows migrate between live servers.
//!
//! `shardplan dynamic` prices latency with a model; this crate measures it, and checks what a model cannot:
//! that no lookup misses or reads a half-migrated row while rows move, and that a server killed in the
//! middle of a migration loses no row.
//!
//! Key parts:
//! - [`wire`]: the messages ([`wire::Request`], [`wire::Response`]) in length-prefixed postcard frames, and
//!   the deterministic embedding values ([`wire::row_value`]) every read is checked against bit for bit.
//! - [`store`]: a server's durable rows, an append-only log of checksummed batches, each synced before the
//!   server answers; recovery drops a torn tail.
//! - [`server`]: one shard server (the binary's `server` subcommand): lookups, loads, copies from another
//!   server (`Pull`), epoch-guarded deletes, inventories.
//! - [`client`]: a multiplexed connection (many calls in flight, answers matched by id).
//! - [`cluster`]: the server processes (the binary re-executing itself), SIGKILL and restart, and the
//!   router's connections, which follow a restarted server to its new port.
//! - [`bench`]: one serving run: the initial load, the load generator (closed or open loop), the controller
//!   that runs the strategy and the migration protocol (copy, switch, drain, delete), kills, inventory
//!   checks, and the [`bench::CellReport`].
//!
//! Why its own crate: tokio, process management and the file system stay out of `alis`, which is sans-IO
//! (CI's dependency guard forbids tokio there), and out of the `shardplan` binary, whose build every other
//! test waits on. The strategies and their placements are the `alis` crate's own, not re-implemented: the
//! harness only turns each placement into a routing table and moves rows to match it.
//!
//! Why tokio with tokio-util's framing and postcard rather than an RPC framework: the harness needs
//! exactly request/response calls multiplexed on a connection, child processes and timers; tokio is the
//! de-facto Rust runtime and provides all three, `LengthDelimitedCodec` the framing, postcard a compact
//! serde encoding. tarpc would add its own transport, tracing and context layers and hide the calls' wire
//! size; gRPC (tonic) adds protobuf code generation and HTTP/2. Build cost: ARCHITECTURE.md.

pub mod bench;
pub mod client;
pub mod cluster;
pub mod report;
pub mod server;
pub mod store;
pub mod wire;

use std::path::PathBuf;

/// Errors of the serving crate's servers and stores; each names the file or address involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system error while `action` on `path` (a file, directory or address).
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// File, directory or address.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A log that cannot be used (not a log, another dimension or shard).
    #[error("log {}: {reason}", path.display())]
    Log {
        /// The log file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing a file atomically failed.
    #[error(transparent)]
    Files(#[from] shardplan_files::Error),
    /// A task of the runtime failed (a panic in a blocking task).
    #[error("internal: {0}")]
    Internal(String),
}
