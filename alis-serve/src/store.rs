//! A shard server's durable rows: an append-only log of batches, each record checksummed and synced before
//! the server answers, replayed at start.
//!
//! File `shard.log` in the server's directory: a 16-byte header (`SPSHARD1`, the dimension and the shard as
//! little-endian u32), then records `[payload length u32][CRC-32 of the payload u32][payload]`, the payload
//! being `[op u8][epoch u64][n u32][n × (table u32, row u64)]` followed, for a put, by `n · dim` f32 values
//! (all little-endian). One record is one batch (a load batch, a migration copy, a delete), so a batch is
//! applied at recovery whole or not at all. A SIGKILL can leave at most a torn last record: recovery stops at
//! the first record that is incomplete or fails its CRC and truncates the file there (counted as
//! `torn_bytes`). The log is rewritten compactly (through `shardplan_files::write_atomic`: temporary file,
//! sync, rename, directory sync) when it grows past twice the rows it holds.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::Error;
use crate::wire::{BATCH_ROWS, Key};

const MAGIC: &[u8; 8] = b"SPSHARD1";
const HEADER_BYTES: u64 = 16;
const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
/// File name of the log inside a server's directory.
pub const LOG_NAME: &str = "shard.log";
/// Largest record payload read back (a record is one batch of at most [`BATCH_ROWS`] rows; anything larger
/// is damage, not data).
const MAX_RECORD_BYTES: usize = 256 << 20;
// Compaction writes records of BATCH_ROWS rows: at the largest dimension served they must stay readable.
const _: () = assert!(BATCH_ROWS * (12 + 4 * crate::wire::MAX_DIM) + 13 <= MAX_RECORD_BYTES);

/// A row held by a server: its values and the epoch of the write that put them here.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Epoch of the routing table that placed the row here when it was written (0: the initial load).
    pub since: u64,
    /// The embedding, `dim` values.
    pub values: Box<[f32]>,
}

/// The rows of one server, in key order.
pub type Rows = BTreeMap<Key, Entry>;

/// One logged batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op<'a> {
    /// Rows written for `epoch`: `values` holds `keys.len() · dim` values.
    Put {
        /// Epoch of the write.
        epoch: u64,
        /// Rows.
        keys: &'a [Key],
        /// Values, row after row.
        values: &'a [f32],
    },
    /// Rows moved away by the migration to `epoch`.
    Delete {
        /// Epoch of that migration.
        epoch: u64,
        /// Rows.
        keys: &'a [Key],
    },
}

/// Applies one batch to `rows`: the one rule of the live path and of recovery. A put keeps a copy written
/// for a later epoch (never goes back); a delete removes only copies written before its epoch, so a stale
/// or repeated delete never removes a row that a later migration brought back. Returns the rows changed.
pub fn apply(rows: &mut Rows, op: &Op<'_>, dim: usize) -> u64 {
    let mut changed = 0;
    match *op {
        Op::Put { epoch, keys, values } => {
            for (key, v) in keys.iter().zip(values.chunks_exact(dim)) {
                let keep_newer = rows.get(key).is_some_and(|e| e.since > epoch);
                if !keep_newer {
                    rows.insert(*key, Entry { since: epoch, values: v.into() });
                    changed += 1;
                }
            }
        }
        Op::Delete { epoch, keys } => {
            for key in keys {
                if rows.get(key).is_some_and(|e| e.since < epoch) {
                    rows.remove(key);
                    changed += 1;
                }
            }
        }
    }
    changed
}

/// What recovery found.
#[derive(Debug, Default)]
pub struct Recovered {
    /// The rows, after every complete record.
    pub rows: Rows,
    /// Complete records applied.
    pub records: u64,
    /// Bytes of the torn tail dropped (0 after a clean stop).
    pub torn_bytes: u64,
}

/// The open log of one server.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    file: File,
    dim: usize,
    shard: u32,
    log_bytes: u64,
    syncs: u64,
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { action, path: path.to_path_buf(), source }
}

fn header(dim: usize, shard: u32) -> Vec<u8> {
    let mut h = MAGIC.to_vec();
    h.extend_from_slice(&(dim as u32).to_le_bytes());
    h.extend_from_slice(&shard.to_le_bytes());
    h
}

/// Appends the record of `op` (length, CRC, payload) to `out`.
fn encode_record(op: &Op<'_>, out: &mut Vec<u8>) {
    let (code, epoch, keys, values) = match *op {
        Op::Put { epoch, keys, values } => (OP_PUT, epoch, keys, values),
        Op::Delete { epoch, keys } => (OP_DELETE, epoch, keys, &[][..]),
    };
    let mut payload = Vec::with_capacity(13 + keys.len() * 12 + values.len() * 4);
    payload.push(code);
    payload.extend_from_slice(&epoch.to_le_bytes());
    payload.extend_from_slice(&(keys.len() as u32).to_le_bytes());
    for &(table, row) in keys {
        payload.extend_from_slice(&table.to_le_bytes());
        payload.extend_from_slice(&row.to_le_bytes());
    }
    for v in values {
        payload.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// A decoded record (owned).
struct Record {
    code: u8,
    epoch: u64,
    keys: Vec<Key>,
    values: Vec<f32>,
}

/// Decodes a payload whose CRC matched; `None` when its fields are inconsistent (treated as damage).
fn decode_record(p: &[u8], dim: usize) -> Option<Record> {
    let code = *p.first()?;
    let epoch = u64::from_le_bytes(p.get(1..9)?.try_into().ok()?);
    let n = u32::from_le_bytes(p.get(9..13)?.try_into().ok()?) as usize;
    let keys_end = 13usize.checked_add(n.checked_mul(12)?)?;
    let keys: Vec<Key> = p
        .get(13..keys_end)?
        .chunks_exact(12)
        .map(|c| {
            let (t, r) = c.split_at(4);
            (
                u32::from_le_bytes([t[0], t[1], t[2], t[3]]),
                u64::from_le_bytes([r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]]),
            )
        })
        .collect();
    let rest = &p[keys_end..];
    let values: Vec<f32> = match code {
        OP_PUT if rest.len() == n.checked_mul(dim)?.checked_mul(4)? => {
            rest.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        OP_DELETE if rest.is_empty() => Vec::new(),
        _ => return None,
    };
    Some(Record { code, epoch, keys, values })
}

impl Store {
    /// Opens (or creates) the log in `dir` and replays it. A log of another dimension or shard, or a file
    /// that is not a log, is an error naming the file; a torn tail is dropped and counted.
    pub fn open(dir: &Path, shard: u32, dim: usize) -> Result<(Store, Recovered), Error> {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
        remove_stale_temporaries(dir)?;
        let path = dir.join(LOG_NAME);
        if !path.exists() {
            shardplan_files::write_atomic(&path, &header(dim, shard))?;
        }
        let rec = recover(&path, shard, dim)?;
        let file = OpenOptions::new().append(true).open(&path).map_err(io("opening", &path))?;
        let log_bytes = file.metadata().map_err(io("reading the size of", &path))?.len();
        let mut store = Store { path, file, dim, shard, log_bytes, syncs: 0 };
        store.compact_if_large(&rec.rows)?;
        Ok((store, rec))
    }

    /// Appends `op` as one record and syncs it: when this returns, the batch survives a kill (and a power
    /// loss, as far as the disk honours fsync).
    pub fn append(&mut self, op: &Op<'_>) -> Result<(), Error> {
        let (keys, values) = match *op {
            Op::Put { keys, values, .. } => (keys.len(), values.len()),
            Op::Delete { keys, .. } => (keys.len(), 0),
        };
        // Recovery takes a record over MAX_RECORD_BYTES for damage and drops it and every record after it, so
        // such a record must be refused here rather than acknowledged (a delete of 64 MiB of repeated keys
        // would be one).
        if keys.saturating_mul(12).saturating_add(values.saturating_mul(4)).saturating_add(13) > MAX_RECORD_BYTES {
            return Err(Error::Log {
                path: self.path.clone(),
                reason: format!("a batch of {keys} rows is larger than a record ({MAX_RECORD_BYTES} bytes)"),
            });
        }
        let mut buf = Vec::new();
        encode_record(op, &mut buf);
        let written = self
            .file
            .write_all(&buf)
            .map_err(io("appending to", &self.path))
            .and_then(|()| self.file.sync_data().map_err(io("syncing", &self.path)));
        if let Err(e) = written {
            // A record written in part (a full disk) must not stay: recovery stops at the first bad record, so
            // every record acknowledged after it would be lost at the next start.
            self.file.set_len(self.log_bytes).map_err(io("truncating a failed append to", &self.path))?;
            return Err(e);
        }
        self.log_bytes += buf.len() as u64;
        self.syncs += 1;
        Ok(())
    }

    /// Rewrites the log as one put per batch of the rows held when it has grown past twice their size
    /// (plus 16 MiB, so that small logs are left alone).
    pub fn compact_if_large(&mut self, rows: &Rows) -> Result<(), Error> {
        let live = rows.len() as u64 * (12 + 4 * self.dim as u64 + 8);
        if self.log_bytes <= 2 * live + (16 << 20) {
            return Ok(());
        }
        let mut buf = header(self.dim, self.shard);
        let mut keys = Vec::with_capacity(BATCH_ROWS);
        let mut values = Vec::with_capacity(BATCH_ROWS * self.dim);
        let mut epoch = None;
        let flush = |keys: &mut Vec<Key>, values: &mut Vec<f32>, epoch: u64, buf: &mut Vec<u8>| {
            if !keys.is_empty() {
                encode_record(&Op::Put { epoch, keys, values }, buf);
                keys.clear();
                values.clear();
            }
        };
        for (key, e) in rows {
            if epoch != Some(e.since) || keys.len() == BATCH_ROWS {
                flush(&mut keys, &mut values, epoch.unwrap_or(0), &mut buf);
                epoch = Some(e.since);
            }
            keys.push(*key);
            values.extend_from_slice(&e.values);
        }
        flush(&mut keys, &mut values, epoch.unwrap_or(0), &mut buf);
        shardplan_files::write_atomic(&self.path, &buf)?;
        self.file = OpenOptions::new().append(true).open(&self.path).map_err(io("opening", &self.path))?;
        self.log_bytes = buf.len() as u64;
        Ok(())
    }

    /// Bytes of the log file.
    #[must_use]
    pub fn log_bytes(&self) -> u64 {
        self.log_bytes
    }

    /// Records written and synced since the store was opened.
    #[must_use]
    pub fn syncs(&self) -> u64 {
        self.syncs
    }
}

/// A compaction killed half-way leaves its temporary file (`.shard.log.tmp…`) behind; the log itself is
/// whole (the rename never happened), so the temporary is removed.
fn remove_stale_temporaries(dir: &Path) -> Result<(), Error> {
    let prefix = format!(".{LOG_NAME}.tmp");
    for entry in std::fs::read_dir(dir).map_err(io("listing", dir))? {
        let entry = entry.map_err(io("listing", dir))?;
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let p = entry.path();
            std::fs::remove_file(&p).map_err(io("removing", &p))?;
        }
    }
    Ok(())
}

/// Replays the log at `path`, truncating a torn tail.
fn recover(path: &Path, shard: u32, dim: usize) -> Result<Recovered, Error> {
    let file = File::open(path).map_err(io("opening", path))?;
    let file_len = file.metadata().map_err(io("reading the size of", path))?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut head = [0u8; HEADER_BYTES as usize];
    let bad = |reason: String| Error::Log { path: path.to_path_buf(), reason };
    r.read_exact(&mut head).map_err(|e| bad(format!("no complete header ({e})")))?;
    if &head[..8] != MAGIC {
        return Err(bad("not a shard log (bad magic)".into()));
    }
    let file_dim = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let file_shard = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
    if file_dim != dim {
        return Err(bad(format!("holds rows of dimension {file_dim}, the server was started with --dim {dim}")));
    }
    if file_shard != shard {
        return Err(bad(format!("belongs to shard {file_shard}, the server was started with --shard {shard}")));
    }
    let mut out = Recovered::default();
    let mut good_end = HEADER_BYTES;
    let mut payload = Vec::new();
    loop {
        let mut rh = [0u8; 8];
        if r.read_exact(&mut rh).is_err() {
            break;
        }
        let len = u32::from_le_bytes([rh[0], rh[1], rh[2], rh[3]]) as usize;
        let crc = u32::from_le_bytes([rh[4], rh[5], rh[6], rh[7]]);
        if len > MAX_RECORD_BYTES {
            break;
        }
        payload.resize(len, 0);
        if r.read_exact(&mut payload).is_err() || crc32fast::hash(&payload) != crc {
            break;
        }
        let Some(rec) = decode_record(&payload, dim) else { break };
        let op = if rec.code == OP_PUT {
            Op::Put { epoch: rec.epoch, keys: &rec.keys, values: &rec.values }
        } else {
            Op::Delete { epoch: rec.epoch, keys: &rec.keys }
        };
        apply(&mut out.rows, &op, dim);
        out.records += 1;
        good_end += 8 + len as u64;
    }
    if good_end < file_len {
        out.torn_bytes = file_len - good_end;
        let f = OpenOptions::new().write(true).open(path).map_err(io("opening", path))?;
        f.set_len(good_end).map_err(io("truncating the torn tail of", path))?;
        f.sync_all().map_err(io("syncing", path))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fill_row;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("alis-serve-store-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn put(store: &mut Store, rows: &mut Rows, epoch: u64, keys: &[Key]) {
        let mut values = Vec::new();
        for &k in keys {
            fill_row(k, 4, &mut values);
        }
        let op = Op::Put { epoch, keys, values: &values };
        store.append(&op).unwrap_or_else(|e| panic!("{e}"));
        apply(rows, &op, 4);
    }

    #[test]
    fn a_reopened_log_holds_what_was_synced() {
        let dir = tmp("reopen");
        let (mut s, rec) = Store::open(&dir, 2, 4).unwrap_or_else(|e| panic!("{e}"));
        assert!(rec.rows.is_empty());
        let mut rows = Rows::new();
        put(&mut s, &mut rows, 0, &[(0, 1), (0, 2), (1, 2)]);
        put(&mut s, &mut rows, 3, &[(0, 9)]);
        let del = Op::Delete { epoch: 3, keys: &[(0, 1), (0, 9)] };
        s.append(&del).unwrap_or_else(|e| panic!("{e}"));
        // (0, 9) was written for epoch 3 itself, so the delete of epoch 3 leaves it.
        assert_eq!(apply(&mut rows, &del, 4), 1);
        drop(s);
        let (_, rec) = Store::open(&dir, 2, 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.rows, rows);
        assert_eq!(rec.records, 3);
        assert_eq!(rec.torn_bytes, 0);
        assert_eq!(rec.rows.keys().copied().collect::<Vec<_>>(), vec![(0, 2), (0, 9), (1, 2)]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_torn_last_record_is_dropped_whole_at_every_cut() {
        // A kill can stop the last write anywhere: at every cut inside the last record, recovery must keep
        // exactly the records before it (never half a batch), and the log must accept appends afterwards.
        let dir = tmp("torn");
        let (mut s, _) = Store::open(&dir, 0, 4).unwrap_or_else(|e| panic!("{e}"));
        let mut rows = Rows::new();
        put(&mut s, &mut rows, 0, &[(0, 1), (0, 2)]);
        let before = rows.clone();
        let good = s.log_bytes();
        put(&mut s, &mut rows, 1, &[(0, 3), (0, 4), (0, 5)]);
        let full = s.log_bytes();
        drop(s);
        let path = dir.join(LOG_NAME);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        for cut in good..full {
            std::fs::write(&path, &bytes[..cut as usize]).unwrap_or_else(|e| panic!("{e}"));
            let (mut s, rec) = Store::open(&dir, 0, 4).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(rec.rows, before, "cut at {cut}");
            assert_eq!(rec.torn_bytes, cut - good);
            let mut again = rec.rows.clone();
            put(&mut s, &mut again, 2, &[(0, 7)]);
            drop(s);
            let (_, rec) = Store::open(&dir, 0, 4).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(rec.rows, again, "append after a torn tail at {cut}");
        }
        // A flipped bit inside the last record fails its CRC: dropped too.
        let mut flipped = bytes.clone();
        flipped[full as usize - 3] ^= 0x10;
        std::fs::write(&path, &flipped).unwrap_or_else(|e| panic!("{e}"));
        let (_, rec) = Store::open(&dir, 0, 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.rows, before);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn what_append_acknowledges_a_reopen_returns() {
        // One row of 64 Mi values makes a record just over MAX_RECORD_BYTES: recovery would drop it (as a torn
        // tail), so append must refuse it instead of acknowledging a row the next start loses.
        let dir = tmp("huge");
        let dim = MAX_RECORD_BYTES / 4;
        let (mut s, _) = Store::open(&dir, 0, dim).unwrap_or_else(|e| panic!("{e}"));
        let values = vec![0.0f32; dim];
        let acked = s.append(&Op::Put { epoch: 0, keys: &[(0, 1)], values: &values }).is_ok();
        drop(s);
        let (_, rec) = Store::open(&dir, 0, dim).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.rows.len(), usize::from(acked), "acknowledged: {acked}, torn bytes: {}", rec.torn_bytes);
        assert_eq!(rec.torn_bytes, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn deletes_are_guarded_by_epoch() {
        let mut rows = Rows::new();
        let v = [0.0f32; 4];
        apply(&mut rows, &Op::Put { epoch: 5, keys: &[(0, 1)], values: &v }, 4);
        // A stale delete (of the migration to epoch 4, which moved an older copy away) leaves the copy of 5.
        assert_eq!(apply(&mut rows, &Op::Delete { epoch: 4, keys: &[(0, 1)] }, 4), 0);
        assert_eq!(apply(&mut rows, &Op::Delete { epoch: 5, keys: &[(0, 1)] }, 4), 0);
        assert_eq!(apply(&mut rows, &Op::Delete { epoch: 6, keys: &[(0, 1)] }, 4), 1);
        // A put for an older epoch never replaces a newer copy.
        apply(&mut rows, &Op::Put { epoch: 7, keys: &[(0, 2)], values: &v }, 4);
        assert_eq!(apply(&mut rows, &Op::Put { epoch: 6, keys: &[(0, 2)], values: &[1.0; 4] }, 4), 0);
        assert_eq!(rows[&(0, 2)].since, 7);
    }

    #[test]
    fn a_log_of_another_dimension_or_shard_is_refused_by_name() {
        let dir = tmp("dim");
        drop(Store::open(&dir, 1, 4).unwrap_or_else(|e| panic!("{e}")));
        let e = Store::open(&dir, 1, 8).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("--dim 8") && e.contains("dimension 4") && e.contains(LOG_NAME), "{e}");
        let e = Store::open(&dir, 3, 4).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("--shard 3"), "{e}");
        std::fs::write(dir.join(LOG_NAME), b"not a log at all").unwrap_or_else(|e| panic!("{e}"));
        let e = Store::open(&dir, 1, 4).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("bad magic"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn compaction_keeps_every_row_and_its_epoch() {
        let dir = tmp("compact");
        let (mut s, _) = Store::open(&dir, 0, 4).unwrap_or_else(|e| panic!("{e}"));
        let mut rows = Rows::new();
        // Write the same rows many times over, so that the log outgrows twice its rows plus the 16 MiB floor.
        let keys: Vec<Key> = (0..BATCH_ROWS as u64).map(|r| (0, r)).collect();
        let mut epoch = 0;
        while s.log_bytes() < 20 << 20 {
            epoch += 1;
            put(&mut s, &mut rows, epoch, &keys);
        }
        put(&mut s, &mut rows, epoch + 1, &[(1, 1)]);
        let before = s.log_bytes();
        s.compact_if_large(&rows).unwrap_or_else(|e| panic!("{e}"));
        assert!(s.log_bytes() < before / 4, "{} -> {}", before, s.log_bytes());
        drop(s);
        let (_, rec) = Store::open(&dir, 0, 4).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(rec.rows, rows);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
