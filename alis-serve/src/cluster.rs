//! The shard-server processes: started by re-executing the harness's own binary (`shardplan-serve server`),
//! each on a free 127.0.0.1 port, killed with SIGKILL and restarted on their logs; and the router's
//! connections to them, which follow a restarted server to its new port.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::client::{CallError, Conn};
use crate::wire::{Request, Response};

/// How long a starting server may take to recover its log and announce its port.
const START_LIMIT: Duration = Duration::from_mins(1);

/// Where each server listens now; a restart publishes a new address under a new generation.
pub struct AddrBook {
    addrs: RwLock<Vec<(SocketAddr, u64)>>,
}

impl AddrBook {
    /// Address and generation of `shard`.
    #[must_use]
    pub fn get(&self, shard: usize) -> (SocketAddr, u64) {
        self.addrs.read().unwrap_or_else(PoisonError::into_inner)[shard]
    }

    fn set(&self, shard: usize, addr: SocketAddr) {
        let mut a = self.addrs.write().unwrap_or_else(PoisonError::into_inner);
        let generation = a[shard].1 + 1;
        a[shard] = (addr, generation);
    }
}

/// What a (re)started server reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartInfo {
    /// Its address.
    pub addr: SocketAddr,
    /// Rows recovered from its log.
    pub rows: u64,
    /// Bytes of torn tail its recovery dropped.
    pub torn_bytes: u64,
}

/// S shard-server processes.
pub struct Cluster {
    exe: PathBuf,
    root: PathBuf,
    dim: usize,
    children: tokio::sync::Mutex<Vec<Option<Child>>>,
    /// Current addresses.
    pub book: Arc<AddrBook>,
    restarts: AtomicU64,
    torn_bytes: AtomicU64,
}

/// The directory of shard `shard` under a cell's data directory.
#[must_use]
pub fn shard_dir(root: &Path, shard: usize) -> PathBuf {
    root.join(format!("shard-{shard}"))
}

/// Parses a server's announcement `ready ADDR rows=N torn_bytes=B`.
fn parse_ready(line: &str) -> Option<StartInfo> {
    let mut parts = line.split_whitespace();
    if parts.next()? != "ready" {
        return None;
    }
    let addr = parts.next()?.parse().ok()?;
    let rows = parts.next()?.strip_prefix("rows=")?.parse().ok()?;
    let torn_bytes = parts.next()?.strip_prefix("torn_bytes=")?.parse().ok()?;
    Some(StartInfo { addr, rows, torn_bytes })
}

impl Cluster {
    /// Starts `shards` servers of `dim` values per row, with their logs under `root`, by running `exe server`.
    pub async fn start(exe: &Path, root: &Path, shards: usize, dim: usize) -> anyhow::Result<Arc<Cluster>> {
        let mut children = Vec::with_capacity(shards);
        let mut addrs = Vec::with_capacity(shards);
        for s in 0..shards {
            let (child, info) = spawn(exe, root, s, dim).await?;
            children.push(Some(child));
            addrs.push((info.addr, 0));
        }
        Ok(Arc::new(Cluster {
            exe: exe.to_path_buf(),
            root: root.to_path_buf(),
            dim,
            children: tokio::sync::Mutex::new(children),
            book: Arc::new(AddrBook { addrs: RwLock::new(addrs) }),
            restarts: AtomicU64::new(0),
            torn_bytes: AtomicU64::new(0),
        }))
    }

    /// Kills server `shard` with SIGKILL (`Child::start_kill`), waits for it to die, and starts it again on
    /// its log; its new address is published to the router.
    pub async fn kill_and_restart(&self, shard: usize) -> anyhow::Result<StartInfo> {
        let mut children = self.children.lock().await;
        if let Some(mut child) = children[shard].take() {
            child.start_kill().with_context(|| format!("killing server {shard}"))?;
            child.wait().await.with_context(|| format!("waiting for killed server {shard}"))?;
        }
        let (child, info) = spawn(&self.exe, &self.root, shard, self.dim).await?;
        children[shard] = Some(child);
        self.book.set(shard, info.addr);
        self.restarts.fetch_add(1, Ordering::Relaxed);
        self.torn_bytes.fetch_add(info.torn_bytes, Ordering::Relaxed);
        Ok(info)
    }

    /// Restarts so far.
    #[must_use]
    pub fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// Torn bytes dropped by restarted servers' recoveries.
    #[must_use]
    pub fn torn_bytes(&self) -> u64 {
        self.torn_bytes.load(Ordering::Relaxed)
    }

    /// Stops every server: closing its standard input ends it (everything it acknowledged is already
    /// synced); one that has not exited after a second is killed.
    pub async fn shutdown(&self) {
        let mut children = self.children.lock().await;
        for child in children.iter_mut().flatten() {
            drop(child.stdin.take());
        }
        for child in children.iter_mut().flatten() {
            if tokio::time::timeout(Duration::from_secs(1), child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
        children.clear();
    }
}

async fn spawn(exe: &Path, root: &Path, shard: usize, dim: usize) -> anyhow::Result<(Child, StartInfo)> {
    let dir = shard_dir(root, shard);
    let mut child = Command::new(exe)
        .arg("server")
        .arg("--shard")
        .arg(shard.to_string())
        .arg("--dir")
        .arg(&dir)
        .arg("--dim")
        .arg(dim.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting server {shard} ({} server)", exe.display()))?;
    let Some(out) = child.stdout.take() else { bail!("server {shard}: no standard output pipe") };
    let mut lines = BufReader::new(out).lines();
    let line = match tokio::time::timeout(START_LIMIT, lines.next_line()).await {
        Ok(Ok(Some(l))) => l,
        Ok(Ok(None)) => bail!("server {shard} exited before announcing its address (see its error above)"),
        Ok(Err(e)) => bail!("reading server {shard}'s announcement: {e}"),
        Err(_) => bail!("server {shard} did not announce its address within {} s", START_LIMIT.as_secs()),
    };
    let Some(info) = parse_ready(&line) else {
        bail!("server {shard} announced {line:?}, expected `ready ADDR rows=N torn_bytes=B`")
    };
    Ok((child, info))
}

/// One lane's connection and the address generation it was made for.
type Lane = Mutex<Option<(u64, Arc<Conn>)>>;

/// The router's connections: `lanes` data connections per server for lookups (a request picks one by its
/// index) and one control connection for loads, migrations and inventories. A connection is remade when
/// it broke or when its server was restarted at a new address.
pub struct Servers {
    book: Arc<AddrBook>,
    lanes: usize,
    conns: Vec<Vec<Lane>>,
}

impl Servers {
    /// Connections (made lazily) to every server in `book`.
    #[must_use]
    pub fn new(book: Arc<AddrBook>, shards: usize, lanes: usize) -> Servers {
        let conns = (0..shards).map(|_| (0..=lanes).map(|_| Mutex::new(None)).collect()).collect();
        Servers { book, lanes, conns }
    }

    /// Number of data lanes per server.
    #[must_use]
    pub fn lanes(&self) -> usize {
        self.lanes
    }

    /// Number of servers.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.conns.len()
    }

    /// Index of the control lane.
    #[must_use]
    pub fn control(&self) -> usize {
        self.lanes
    }

    async fn conn(&self, shard: usize, lane: usize) -> Result<Arc<Conn>, CallError> {
        let (addr, generation) = self.book.get(shard);
        let slot = &self.conns[shard][lane];
        let cached = slot.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some((g, c)) = cached
            && g == generation
            && c.is_open()
        {
            return Ok(c);
        }
        let c = Conn::connect(addr).await?;
        *slot.lock().unwrap_or_else(PoisonError::into_inner) = Some((generation, c.clone()));
        Ok(c)
    }

    /// One call to `shard` on `lane`; a broken or timed-out connection is dropped so the next call remakes it.
    pub async fn call(&self, shard: usize, lane: usize, req: &Request, limit: Duration) -> Result<Response, CallError> {
        let conn = self.conn(shard, lane).await?;
        let r = conn.call(req, limit).await;
        if matches!(r, Err(CallError::Closed { .. } | CallError::Timeout { .. })) {
            let mut slot = self.conns[shard][lane].lock().unwrap_or_else(PoisonError::into_inner);
            if slot.as_ref().is_some_and(|(_, c)| Arc::ptr_eq(c, &conn)) {
                *slot = None;
            }
        }
        r
    }

    /// The current address of `shard`.
    #[must_use]
    pub fn addr(&self, shard: usize) -> SocketAddr {
        self.book.get(shard).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_parse_or_are_refused() {
        let ok = parse_ready("ready 127.0.0.1:4000 rows=12 torn_bytes=3");
        assert_eq!(ok.map(|i| (i.addr.port(), i.rows, i.torn_bytes)), Some((4000, 12, 3)));
        assert_eq!(parse_ready("listening 127.0.0.1:4000 rows=12 torn_bytes=3"), None);
        assert_eq!(parse_ready("ready nowhere rows=1 torn_bytes=0"), None);
        assert_eq!(parse_ready("ready 127.0.0.1:1 rows=x torn_bytes=0"), None);
    }
}
