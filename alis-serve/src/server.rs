//! A shard server: holds the embedding rows routed to it, serves lookups, and takes part in migrations
//! (copying rows from another server, deleting rows moved away), every write logged and synced first.
//!
//! One thread (a current-thread runtime) serves all connections; log writes and syncs run on tokio's
//! blocking pool, so lookups go on while a batch is being synced. A write is applied to the rows in memory
//! only after its record is synced, under the store's lock, so the log's order is the order of the writes
//! and a row is visible only once it is whole and durable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::Error;
use crate::client::Conn;
use crate::store::{self, Op, Rows, Store};
use crate::wire::{self, BATCH_ROWS, Key, Request, Response, ServerStats};

/// How long a server waits for another server during a copy.
const PULL_CALL_LIMIT: Duration = Duration::from_secs(20);

/// What a server is started with.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Shard index (recorded in the log's header and checked at every start).
    pub shard: u32,
    /// Directory of the server's log.
    pub dir: PathBuf,
    /// Values per row.
    pub dim: usize,
}

struct Shared {
    dim: usize,
    rows: RwLock<Rows>,
    store: Mutex<Store>,
    lookups: AtomicU64,
    lookup_misses: AtomicU64,
    stale_lookups: AtomicU64,
    newest_delete_epoch: AtomicU64,
    /// The newest epoch of a copy or delete this server was asked for. The router starts migration e + 1
    /// only once every copy of e has answered, so a copy of an older epoch still writing is one whose caller
    /// timed out and asked again; its late rows are refused (a later migration may have moved them away and
    /// deleted them here, and the late write would bring them back where no routing points).
    newest_migration_epoch: AtomicU64,
    stale_copies: AtomicU64,
    torn_bytes: u64,
}

/// A started server: its address and what recovery found.
pub struct Started {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// Rows recovered from its log.
    pub rows: u64,
    /// Bytes of a torn tail dropped at recovery.
    pub torn_bytes: u64,
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// Recovers the server's log and binds `127.0.0.1` on a free port; call [`Started::serve`] next.
pub async fn start(cfg: &ServerConfig) -> Result<Started, Error> {
    let c = cfg.clone();
    let (store, rec) = tokio::task::spawn_blocking(move || Store::open(&c.dir, c.shard, c.dim))
        .await
        .map_err(|e| Error::Internal(format!("recovery task: {e}")))??;
    let listener = TcpListener::bind("127.0.0.1:0").await.map_err(|source| Error::Io {
        action: "binding",
        path: "127.0.0.1:0".into(),
        source,
    })?;
    let addr = listener.local_addr().map_err(|source| Error::Io {
        action: "reading the address of",
        path: "the listener".into(),
        source,
    })?;
    let rows = rec.rows.len() as u64;
    let shared = Arc::new(Shared {
        dim: cfg.dim,
        rows: RwLock::new(rec.rows),
        store: Mutex::new(store),
        lookups: AtomicU64::new(0),
        lookup_misses: AtomicU64::new(0),
        stale_lookups: AtomicU64::new(0),
        newest_delete_epoch: AtomicU64::new(0),
        newest_migration_epoch: AtomicU64::new(0),
        stale_copies: AtomicU64::new(0),
        torn_bytes: rec.torn_bytes,
    });
    Ok(Started { addr, rows, torn_bytes: rec.torn_bytes, listener, shared })
}

impl Started {
    /// Serves connections until the process ends.
    pub async fn serve(self) -> Result<(), Error> {
        loop {
            let (sock, _) = self.listener.accept().await.map_err(|source| Error::Io {
                action: "accepting on",
                path: self.addr.to_string().into(),
                source,
            })?;
            let shared = self.shared.clone();
            tokio::spawn(async move {
                // A broken connection ends only itself; the client reconnects.
                let _ = connection(shared, sock).await;
            });
        }
    }
}

/// True when `buf` starts with a whole frame (then the answer to the current request need not be flushed
/// yet: the next one is already here, and its answer will follow in the same write).
fn holds_whole_frame(buf: &[u8]) -> bool {
    buf.len() >= 4 && buf.len() - 4 >= u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize
}

async fn connection(shared: Arc<Shared>, sock: TcpStream) -> std::io::Result<()> {
    sock.set_nodelay(true)?;
    let (r, w) = sock.into_split();
    let mut reader = FramedRead::new(r, wire::codec());
    let mut writer = FramedWrite::new(w, wire::codec());
    while let Some(frame) = reader.next().await {
        let frame = frame?;
        let (id, resp) = match wire::decode::<Request>(&frame) {
            Ok(env) => (env.id, handle(&shared, env.body).await),
            Err(e) => (0, Response::Error { message: format!("undecodable request: {e}") }),
        };
        let bytes = wire::encode(id, &resp).map_err(std::io::Error::other)?;
        writer.feed(bytes).await?;
        if !holds_whole_frame(reader.read_buffer()) {
            SinkExt::<bytes::Bytes>::flush(&mut writer).await?;
        }
    }
    Ok(())
}

fn read_rows(shared: &Shared, keys: &[Key]) -> (Vec<f32>, Vec<u32>) {
    let rows = shared.rows.read().unwrap_or_else(PoisonError::into_inner);
    let mut values = Vec::with_capacity(keys.len() * shared.dim);
    let mut missing = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        match rows.get(k) {
            Some(e) => values.extend_from_slice(&e.values),
            None => missing.push(i as u32),
        }
    }
    (values, missing)
}

/// Logs, syncs and then applies one batch (on the blocking pool); returns the rows changed. A put of an
/// epoch older than the newest copy or delete asked of this server is refused (counted as a stale copy):
/// the check runs under the store's lock, and a migration's epoch is recorded before its write takes the
/// lock, so a stale put is either logged before that write (and a delete then removes it) or refused.
async fn write(shared: &Arc<Shared>, put: bool, epoch: u64, keys: Vec<Key>, values: Vec<f32>) -> Result<u64, String> {
    let s = shared.clone();
    tokio::task::spawn_blocking(move || {
        let op = if put { Op::Put { epoch, keys: &keys, values: &values } } else { Op::Delete { epoch, keys: &keys } };
        let mut st = s.store.lock().unwrap_or_else(PoisonError::into_inner);
        let newest = s.newest_migration_epoch.load(Ordering::Acquire);
        if put && epoch < newest {
            s.stale_copies.fetch_add(1, Ordering::Relaxed);
            return Err(format!("a copy for epoch {epoch} after epoch {newest} began: stale, not written"));
        }
        st.append(&op).map_err(|e| e.to_string())?;
        let mut rows = s.rows.write().unwrap_or_else(PoisonError::into_inner);
        let changed = store::apply(&mut rows, &op, s.dim);
        st.compact_if_large(&rows).map_err(|e| e.to_string())?;
        Ok(changed)
    })
    .await
    .map_err(|e| format!("write task: {e}"))?
}

/// True when the answer to a `Lookup` or `Read` could not fit one frame: refused before `read_rows` reserves
/// `keys · dim` values, which a small frame of repeated keys would otherwise turn into gigabytes.
fn too_large_to_answer(req: &Request, dim: usize) -> bool {
    let (Request::Lookup { keys, .. } | Request::Read { keys }) = req else { return false };
    keys.len().saturating_mul(dim).saturating_mul(4) > wire::MAX_FRAME_BYTES
}

async fn handle(shared: &Arc<Shared>, req: Request) -> Response {
    let dim = shared.dim;
    match req {
        Request::Lookup { .. } | Request::Read { .. } if too_large_to_answer(&req, dim) => Response::Error {
            message: format!(
                "a read of more rows than one answer frame ({} bytes) holds at dim {dim}",
                wire::MAX_FRAME_BYTES
            ),
        },
        Request::Lookup { epoch, keys } => {
            let (values, missing) = read_rows(shared, &keys);
            shared.lookups.fetch_add(1, Ordering::Relaxed);
            shared.lookup_misses.fetch_add(missing.len() as u64, Ordering::Relaxed);
            if epoch < shared.newest_delete_epoch.load(Ordering::Acquire) {
                shared.stale_lookups.fetch_add(1, Ordering::Relaxed);
            }
            Response::Rows { values, missing }
        }
        Request::Read { keys } => {
            let (values, missing) = read_rows(shared, &keys);
            Response::Rows { values, missing }
        }
        Request::Put { epoch, keys, values } => {
            if values.len() != keys.len() * dim {
                return Response::Error {
                    message: format!(
                        "put of {} rows carries {} values (expected {} at dim {dim})",
                        keys.len(),
                        values.len(),
                        keys.len() * dim
                    ),
                };
            }
            let n = keys.len() as u64;
            match write(shared, true, epoch, keys, values).await {
                Ok(_) => Response::Done { rows: n },
                Err(message) => Response::Error { message },
            }
        }
        Request::Pull { epoch, source, keys } => {
            shared.newest_migration_epoch.fetch_max(epoch, Ordering::AcqRel);
            pull(shared, epoch, &source, keys).await
        }
        Request::Delete { epoch, keys } => {
            shared.newest_migration_epoch.fetch_max(epoch, Ordering::AcqRel);
            match write(shared, false, epoch, keys, Vec::new()).await {
                Ok(rows) => {
                    shared.newest_delete_epoch.fetch_max(epoch, Ordering::AcqRel);
                    Response::Done { rows }
                }
                Err(message) => Response::Error { message },
            }
        }
        Request::Inventory { after, limit } => {
            let rows = shared.rows.read().unwrap_or_else(PoisonError::into_inner);
            let range = match after {
                Some(k) => rows.range((std::ops::Bound::Excluded(k), std::ops::Bound::Unbounded)),
                None => rows.range(..),
            };
            let (mut keys, mut hashes) = (Vec::new(), Vec::new());
            for (k, e) in range.take(limit as usize) {
                keys.push(*k);
                hashes.push(wire::values_hash(&e.values));
            }
            Response::Inventory { keys, hashes }
        }
        Request::Ping => {
            let rows = shared.rows.read().unwrap_or_else(PoisonError::into_inner).len() as u64;
            let (log_bytes, syncs) = {
                let st = shared.store.lock().unwrap_or_else(PoisonError::into_inner);
                (st.log_bytes(), st.syncs())
            };
            Response::Pong(ServerStats {
                rows,
                lookups: shared.lookups.load(Ordering::Relaxed),
                lookup_misses: shared.lookup_misses.load(Ordering::Relaxed),
                stale_lookups: shared.stale_lookups.load(Ordering::Relaxed),
                stale_copies: shared.stale_copies.load(Ordering::Relaxed),
                log_bytes,
                syncs,
                torn_bytes: shared.torn_bytes,
            })
        }
    }
}

/// Copies `keys` from the server at `source` batch by batch, each batch logged and synced here before the
/// next is read. Rows the source lacks are reported, never invented.
async fn pull(shared: &Arc<Shared>, epoch: u64, source: &str, keys: Vec<Key>) -> Response {
    let dim = shared.dim;
    let addr: SocketAddr = match source.parse() {
        Ok(a) => a,
        Err(e) => return Response::Error { message: format!("bad source address {source:?}: {e}") },
    };
    let conn = match Conn::connect(addr).await {
        Ok(c) => c,
        Err(e) => return Response::Error { message: format!("source unreachable: {e}") },
    };
    let (mut copied, mut lacking) = (0u64, Vec::new());
    for batch in keys.chunks(BATCH_ROWS) {
        let (values, missing) = match conn.call(&Request::Read { keys: batch.to_vec() }, PULL_CALL_LIMIT).await {
            Ok(Response::Rows { values, missing }) => (values, missing),
            Ok(other) => return Response::Error { message: format!("source answered a read with {other:?}") },
            Err(e) => return Response::Error { message: format!("reading from the source: {e}") },
        };
        let mut found = Vec::with_capacity(batch.len());
        let mut m = missing.iter().peekable();
        for (i, k) in batch.iter().enumerate() {
            if m.peek().is_some_and(|&&j| j as usize == i) {
                m.next();
                lacking.push(*k);
            } else {
                found.push(*k);
            }
        }
        if values.len() != found.len() * dim {
            return Response::Error {
                message: format!("source sent {} values for {} rows at dim {dim}", values.len(), found.len()),
            };
        }
        copied += found.len() as u64;
        if !found.is_empty()
            && let Err(message) = write(shared, true, epoch, found, values).await
        {
            return Response::Error { message };
        }
    }
    if lacking.is_empty() { Response::Done { rows: copied } } else { Response::SourceMissing { copied, keys: lacking } }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `body` against a fresh server of dimension `dim` whose log lives in a temporary directory.
    fn with_server(name: &str, dim: usize, body: impl AsyncFnOnce(&Arc<Shared>)) {
        let dir = std::env::temp_dir().join(format!("alis-serve-server-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(async {
            let cfg = ServerConfig { shard: 0, dir: dir.clone(), dim };
            let started = start(&cfg).await.unwrap_or_else(|e| panic!("{e}"));
            body(&started.shared).await;
        });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_read_whose_answer_cannot_fit_a_frame_is_refused_before_allocating() {
        // 5 000 repeated keys are a 10 kB frame, but their answer at dim 4 096 would be 82 MB: more than a
        // frame can carry, so it could never be sent, and `read_rows` would reserve it all first (a 64 MiB
        // frame of repeated keys asks for gigabytes).
        with_server("big-read", 4096, async |sh| {
            let keys = vec![(0u32, 0u64); 5000];
            for req in [Request::Lookup { epoch: 0, keys: keys.clone() }, Request::Read { keys }] {
                let resp = handle(sh, req).await;
                assert!(matches!(resp, Response::Error { .. }), "{:?}", std::mem::discriminant(&resp));
            }
            // A read that fits is answered as usual.
            let resp = handle(sh, Request::Read { keys: vec![(0, 0); 4] }).await;
            assert_eq!(resp, Response::Rows { values: Vec::new(), missing: vec![0, 1, 2, 3] });
        });
    }

    #[test]
    fn a_copy_still_writing_after_a_newer_migration_began_is_refused() {
        // A pull whose caller timed out and asked again keeps running; if it writes a row after the next
        // migration moved that row away and deleted it here, the row would be held where no routing points.
        with_server("stale-copy", 2, async |sh| {
            let key = (0u32, 7u64);
            let mut values = Vec::new();
            wire::fill_row(key, 2, &mut values);
            // Copied for epoch 2, then moved away and deleted by the migration to epoch 3.
            assert_eq!(write(sh, true, 2, vec![key], values.clone()).await, Ok(1));
            let del = handle(sh, Request::Delete { epoch: 3, keys: vec![key] }).await;
            assert_eq!(del, Response::Done { rows: 1 });
            // The late batch of the epoch-2 copy is refused and counted; the row stays gone.
            let late = write(sh, true, 2, vec![key], values.clone()).await;
            assert!(late.as_ref().is_err_and(|m| m.contains("epoch 2 after epoch 3")), "{late:?}");
            let read = handle(sh, Request::Read { keys: vec![key] }).await;
            assert_eq!(read, Response::Rows { values: Vec::new(), missing: vec![0] });
            let Response::Pong(st) = handle(sh, Request::Ping).await else { panic!("no pong") };
            assert_eq!((st.rows, st.stale_copies), (0, 1));
            // A copy of the current epoch (the row coming back) is written as usual.
            assert_eq!(write(sh, true, 3, vec![key], values).await, Ok(1));
        });
    }
}
