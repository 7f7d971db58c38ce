//! A multiplexed client connection: many calls in flight on one TCP stream, matched to their answers by id.
//!
//! A writer task batches outgoing frames (every frame queued is written before one flush); a reader task
//! hands each answer to the waiting caller. When the connection breaks (the server was killed), every call
//! in flight and every later call fails with [`CallError::Closed`]; the caller reconnects.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::wire::{self, Request, Response};

/// Why a call got no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The connection could not be made or broke before the answer (the server is down or restarting).
    #[error("connection to {addr} lost: {reason}")]
    Closed {
        /// Server address.
        addr: SocketAddr,
        /// What happened.
        reason: String,
    },
    /// No answer within the call's time limit.
    #[error("no answer from {addr} within {limit_ms} ms")]
    Timeout {
        /// Server address.
        addr: SocketAddr,
        /// The limit.
        limit_ms: u64,
    },
    /// The server answered with an error.
    #[error("server {addr} refused: {message}")]
    Refused {
        /// Server address.
        addr: SocketAddr,
        /// The server's message.
        message: String,
    },
}

type Pending = Arc<Mutex<PendingCalls>>;

/// Calls waiting for their answer; `open` turns false once, when the connection breaks, under the same lock
/// as the map, so a call is either registered before the break (and failed by it) or refused at once.
struct PendingCalls {
    open: bool,
    waiting: HashMap<u64, oneshot::Sender<Response>>,
}

fn close(pending: &Pending) {
    let mut p = pending.lock().unwrap_or_else(PoisonError::into_inner);
    p.open = false;
    // Dropping the senders fails every waiting call.
    p.waiting.clear();
}

/// One connection to a server.
pub struct Conn {
    addr: SocketAddr,
    next_id: AtomicU64,
    pending: Pending,
    tx: mpsc::UnboundedSender<Bytes>,
}

impl Conn {
    /// Connects to `addr` (no Nagle delay: requests are small and latency-bound).
    pub async fn connect(addr: SocketAddr) -> Result<Arc<Conn>, CallError> {
        let closed = |e: std::io::Error| CallError::Closed { addr, reason: e.to_string() };
        let stream = TcpStream::connect(addr).await.map_err(closed)?;
        stream.set_nodelay(true).map_err(closed)?;
        let (r, w) = stream.into_split();
        let pending: Pending = Arc::new(Mutex::new(PendingCalls { open: true, waiting: HashMap::new() }));
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        let mut writer = FramedWrite::new(w, wire::codec());
        let wp = pending.clone();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                let mut ok = writer.feed(frame).await.is_ok();
                while ok && let Ok(more) = rx.try_recv() {
                    ok = writer.feed(more).await.is_ok();
                }
                if !(ok && SinkExt::<Bytes>::flush(&mut writer).await.is_ok()) {
                    close(&wp);
                    return;
                }
            }
        });
        let mut reader = FramedRead::new(r, wire::codec());
        let rp = pending.clone();
        tokio::spawn(async move {
            while let Some(Ok(frame)) = reader.next().await {
                let Ok(env) = wire::decode::<Response>(&frame) else { break };
                let waiter = rp.lock().unwrap_or_else(PoisonError::into_inner).waiting.remove(&env.id);
                if let Some(w) = waiter {
                    let _ = w.send(env.body);
                }
            }
            close(&rp);
        });
        Ok(Arc::new(Conn { addr, next_id: AtomicU64::new(1), pending, tx }))
    }

    /// True until the connection breaks.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).open
    }

    /// The server's address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sends `req` and waits at most `limit` for its answer; a [`Response::Error`] becomes
    /// [`CallError::Refused`].
    pub async fn call(&self, req: &Request, limit: Duration) -> Result<Response, CallError> {
        let addr = self.addr;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = wire::encode(id, req).map_err(|e| CallError::Refused { addr, message: e.to_string() })?;
        let (tx, rx) = oneshot::channel();
        {
            let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            if !p.open {
                return Err(CallError::Closed { addr, reason: "connection closed".into() });
            }
            p.waiting.insert(id, tx);
        }
        if self.tx.send(frame).is_err() {
            close(&self.pending);
            return Err(CallError::Closed { addr, reason: "writer stopped".into() });
        }
        match tokio::time::timeout(limit, rx).await {
            Ok(Ok(Response::Error { message })) => Err(CallError::Refused { addr, message }),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(_)) => Err(CallError::Closed { addr, reason: "connection broke before the answer".into() }),
            Err(_) => {
                self.pending.lock().unwrap_or_else(PoisonError::into_inner).waiting.remove(&id);
                Err(CallError::Timeout { addr, limit_ms: limit.as_millis() as u64 })
            }
        }
    }
}
