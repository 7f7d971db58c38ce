//! The deployed row → shard assignment shared by all strategies, and the capacity rule they all obey.

use crate::stream::Stream;

/// Row → shard assignment of the rows known so far (`0..len`), with per-shard row loads.
///
/// The cap is `⌈(1 + ε) · known_rows / S⌉` rows per shard. It only grows as rows are discovered, so a row that
/// stays where it is never breaks it; every placement goes through [`Placement::place`], which spills to the
/// next preferred shard with room and finally to the least loaded shard.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    shards: usize,
    epsilon: f64,
    shard: Vec<u16>,
    load: Vec<usize>,
}

impl Placement {
    /// An empty placement over `shards` shards with balance slack `epsilon` (validated by the caller).
    #[must_use]
    pub fn new(shards: usize, epsilon: f64) -> Self {
        Placement { shards, epsilon, shard: Vec::new(), load: vec![0; shards] }
    }

    /// Number of shards S.
    #[must_use]
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Number of rows placed (the rows known so far).
    #[must_use]
    pub fn len(&self) -> usize {
        self.shard.len()
    }

    /// True when no row is placed yet.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shard.is_empty()
    }

    /// Rows per shard.
    #[must_use]
    pub fn loads(&self) -> &[usize] {
        &self.load
    }

    /// The per-shard row cap for `rows` known rows.
    #[must_use]
    pub fn cap_for(&self, rows: usize) -> usize {
        ((1.0 + self.epsilon) * rows as f64 / self.shards as f64).ceil().max(1.0) as usize
    }

    /// The current cap.
    #[must_use]
    pub fn cap(&self) -> usize {
        self.cap_for(self.shard.len())
    }

    /// The assignment as a slice (index = dense row).
    #[must_use]
    pub fn as_slice(&self) -> &[u16] {
        &self.shard
    }

    /// Shard serving `row`: its placement, or the hash fallback for a row not placed yet (a row seen for the
    /// first time lives where the default hash rule put it).
    #[must_use]
    pub fn shard_of(&self, stream: &Stream, row: u32) -> u16 {
        self.shard.get(row as usize).copied().unwrap_or_else(|| hash_shard(stream, row, self.shards))
    }

    /// Places the rows `len()..rows` at their hash shard (spilling under the cap for the final row count).
    pub fn grow_hash(&mut self, stream: &Stream, rows: usize) {
        let old = self.shard.len();
        if rows <= old {
            return;
        }
        let cap = self.cap_for(rows);
        for row in old..rows {
            let pref = hash_shard(stream, row as u32, self.shards);
            let s = self.pick(&[pref], cap);
            self.shard.push(s);
            self.load[s as usize] += 1;
        }
    }

    /// Moves the already placed `row` to the first shard in `prefs` with room under the cap, else back to
    /// its own shard, else the least loaded shard. Returns whether it moved.
    pub fn place(&mut self, row: u32, prefs: &[u16]) -> bool {
        self.place_under(row, prefs, self.cap())
    }

    /// [`Placement::place`] with the cap given: callers placing many rows compute it once.
    pub(crate) fn place_under(&mut self, row: u32, prefs: &[u16], cap: usize) -> bool {
        let r = row as usize;
        let old = self.shard[r];
        self.load[old as usize] -= 1;
        let mut s = None;
        for &p in prefs.iter().chain(std::iter::once(&old)) {
            if (p as usize) < self.shards && self.load[p as usize] < cap {
                s = Some(p);
                break;
            }
        }
        let s = s.unwrap_or_else(|| crate::partition::least_loaded(&self.load) as u16);
        self.shard[r] = s;
        self.load[s as usize] += 1;
        s != old
    }

    /// Replaces the whole assignment of the known rows (used by full re-partitions whose result already obeys
    /// the cap). `assign.len()` must be at least `len()`.
    pub fn set_all(&mut self, assign: Vec<u16>) {
        self.load.fill(0);
        for &s in &assign {
            self.load[s as usize] += 1;
        }
        self.shard = assign;
    }

    /// Moves each of `rows` to its shard in `shards`, all loads updated together (so a row may enter a shard
    /// that another row of the list leaves). The caller keeps the cap (a result computed within it).
    pub(crate) fn reassign(&mut self, rows: &[u32], shards: &[u16]) {
        for &r in rows {
            self.load[self.shard[r as usize] as usize] -= 1;
        }
        for (&r, &s) in rows.iter().zip(shards) {
            self.shard[r as usize] = s;
            self.load[s as usize] += 1;
        }
    }

    /// Takes `counts[s]` rows of every shard `s` out of its load without moving them, so that the rows placed
    /// next may use their room. [`Placement::take_back`] must follow.
    pub fn set_aside(&mut self, counts: &[usize]) {
        for (l, &c) in self.load.iter_mut().zip(counts) {
            *l -= c;
        }
    }

    /// Counts the set-aside rows back where they fit under the cap and returns, per shard, how many do not
    /// fit. The caller must [`Placement::relocate`] exactly that many of them off each shard.
    pub fn take_back(&mut self, counts: &[usize]) -> Vec<usize> {
        let cap = self.cap();
        let mut excess = vec![0; self.shards];
        for ((l, &c), e) in self.load.iter_mut().zip(counts).zip(&mut excess) {
            let keep = c.min(cap.saturating_sub(*l));
            *l += keep;
            *e = c - keep;
        }
        excess
    }

    /// Puts a set-aside row that did not fit back on the least loaded shard.
    pub fn relocate(&mut self, row: u32) {
        let s = crate::partition::least_loaded(&self.load);
        self.shard[row as usize] = s as u16;
        self.load[s] += 1;
    }

    fn pick(&self, prefs: &[u16], cap: usize) -> u16 {
        for &p in prefs {
            if (p as usize) < self.shards && self.load[p as usize] < cap {
                return p;
            }
        }
        crate::partition::least_loaded(&self.load) as u16
    }

    /// Heap bytes held.
    #[must_use]
    pub fn heap_bytes(&self) -> usize {
        self.shard.capacity() * 2 + self.load.capacity() * std::mem::size_of::<usize>()
    }
}

/// The hash rule `(row_id + table_id) mod S`: TensorFlow's default `id mod S`, with tables rotated by their id
/// so that row 0 of every table does not land on shard 0.
#[must_use]
pub fn hash_shard(stream: &Stream, row: u32, shards: usize) -> u16 {
    let key = stream.row_key(row).wrapping_add(u64::from(stream.row_table(row)));
    (key % shards as u64) as u16
}
