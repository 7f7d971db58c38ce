//! The weighted hypergraph of one level of the multilevel partitioner: vertex weights (rows merged into a
//! cluster), net weights (parallel nets merged into one), both directions in compressed form; contraction
//! of clusters and extraction of one side of a bisection.
//!
//! Invariants (established by the validated [`super::Hypergraph`] and kept by every operation here): pins
//! of a net are distinct and `< n`, every net has at least two pins, net weights are positive and their sum
//! fits an `i64`, vertex weights are positive and their sum is at most the input's vertex count. Sums of
//! weights therefore never overflow and are added without checks.

/// A weighted hypergraph: `n` vertices, `m` nets.
#[derive(Debug, Clone, Default)]
pub(super) struct Hg {
    /// Vertex weights (rows per vertex).
    pub vw: Vec<u64>,
    /// Net weights.
    pub nw: Vec<i64>,
    net_off: Vec<usize>,
    pins: Vec<u32>,
    vtx_off: Vec<usize>,
    inc: Vec<u32>,
    /// Sum of the vertex weights.
    pub total_w: u64,
}

impl Hg {
    /// Builds the incidence lists of nets given in compressed form (`net_off[e]..net_off[e + 1]` of `pins`).
    pub fn build(vw: Vec<u64>, net_off: Vec<usize>, pins: Vec<u32>, nw: Vec<i64>) -> Hg {
        let n = vw.len();
        let mut vtx_off = vec![0usize; n + 1];
        for &p in &pins {
            vtx_off[p as usize + 1] += 1;
        }
        for v in 0..n {
            vtx_off[v + 1] += vtx_off[v];
        }
        let mut fill = vtx_off.clone();
        let mut inc = vec![0u32; pins.len()];
        for e in 0..nw.len() {
            for &p in &pins[net_off[e]..net_off[e + 1]] {
                inc[fill[p as usize]] = e as u32;
                fill[p as usize] += 1;
            }
        }
        let total_w = vw.iter().sum();
        Hg { vw, nw, net_off, pins, vtx_off, inc, total_w }
    }

    /// Number of vertices.
    pub fn n(&self) -> usize {
        self.vw.len()
    }

    /// Number of nets.
    pub fn m(&self) -> usize {
        self.nw.len()
    }

    /// Pins of net `e`.
    pub fn net(&self, e: usize) -> &[u32] {
        &self.pins[self.net_off[e]..self.net_off[e + 1]]
    }

    /// Size of net `e`.
    pub fn net_size(&self, e: usize) -> usize {
        self.net_off[e + 1] - self.net_off[e]
    }

    /// Nets of vertex `v`.
    pub fn nets_of(&self, v: usize) -> &[u32] {
        &self.inc[self.vtx_off[v]..self.vtx_off[v + 1]]
    }

    /// Contracts every vertex `v` into coarse vertex `cluster[v] < n_coarse`: vertex weights add up, pins of a
    /// net that fall into one cluster count once, nets left with one pin are dropped (they cost nothing
    /// wherever the cluster goes) and parallel nets (the same pins) become one net carrying their summed
    /// weight. Coarse nets keep the order of their first fine net.
    pub fn contract(&self, cluster: &[u32], n_coarse: usize) -> Hg {
        let mut vw = vec![0u64; n_coarse];
        for (v, &c) in cluster.iter().enumerate() {
            vw[c as usize] += self.vw[v];
        }
        let mut net_off = Vec::with_capacity(self.m() + 1);
        net_off.push(0);
        let mut pins: Vec<u32> = Vec::with_capacity(self.pins.len());
        let mut nw: Vec<i64> = Vec::with_capacity(self.m());
        let mut mark = vec![u32::MAX; n_coarse];
        for e in 0..self.m() {
            let start = pins.len();
            for &p in self.net(e) {
                let c = cluster[p as usize];
                if mark[c as usize] != e as u32 {
                    mark[c as usize] = e as u32;
                    pins.push(c);
                }
            }
            if pins.len() - start < 2 {
                pins.truncate(start);
                continue;
            }
            pins[start..].sort_unstable();
            net_off.push(pins.len());
            nw.push(self.nw[e]);
        }
        let (net_off, pins, nw) = merge_parallel(net_off, pins, nw);
        Hg::build(vw, net_off, pins, nw)
    }

    /// The vertices with `part[v] == side` as their own hypergraph, each net restricted to its pins on that
    /// side (kept when at least two remain): what a bisection leaves each half to split further. For the
    /// connectivity objective this is exact: a net's further cost inside one half only counts the half's
    /// blocks. Returns the hypergraph and the original id of each of its vertices.
    pub fn side(&self, part: &[u16], side: u16) -> (Hg, Vec<u32>) {
        let mut local = vec![u32::MAX; self.n()];
        let mut ids = Vec::new();
        for v in 0..self.n() {
            if part[v] == side {
                local[v] = ids.len() as u32;
                ids.push(v as u32);
            }
        }
        let vw: Vec<u64> = ids.iter().map(|&v| self.vw[v as usize]).collect();
        let mut net_off = vec![0usize];
        let mut pins = Vec::new();
        let mut nw = Vec::new();
        for e in 0..self.m() {
            let start = pins.len();
            pins.extend(self.net(e).iter().filter(|&&p| part[p as usize] == side).map(|&p| local[p as usize]));
            if pins.len() - start < 2 {
                pins.truncate(start);
                continue;
            }
            net_off.push(pins.len());
            nw.push(self.nw[e]);
        }
        (Hg::build(vw, net_off, pins, nw), ids)
    }
}

/// A 64-bit hash of a sorted pin list (FNV-1a over the ids, then a final mix): equal lists hash equally on
/// every target.
fn pins_hash(pins: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &p in pins {
        h ^= u64::from(p);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// Merges nets with identical (sorted) pin lists into the first of them, summing weights.
fn merge_parallel(net_off: Vec<usize>, pins: Vec<u32>, nw: Vec<i64>) -> (Vec<usize>, Vec<u32>, Vec<i64>) {
    let m = nw.len();
    let net = |e: usize| &pins[net_off[e]..net_off[e + 1]];
    let mut keys: Vec<(u64, u32)> = (0..m).map(|e| (pins_hash(net(e)), e as u32)).collect();
    keys.sort_unstable();
    // rep[e] = the first net with e's pins (e itself when it is the first).
    let mut rep: Vec<u32> = (0..m as u32).collect();
    let mut any = false;
    let mut i = 0;
    while i < keys.len() {
        let mut j = i + 1;
        while j < keys.len() && keys[j].0 == keys[i].0 {
            j += 1;
        }
        // Within a run of equal hashes (nets in increasing index order), each net joins the first earlier
        // net with the same pins.
        for a in i + 1..j {
            let ea = keys[a].1 as usize;
            for &(_, eb) in &keys[i..a] {
                let eb = eb as usize;
                if rep[eb] as usize == eb && net(eb) == net(ea) {
                    rep[ea] = eb as u32;
                    any = true;
                    break;
                }
            }
        }
        i = j;
    }
    if !any {
        return (net_off, pins, nw);
    }
    let mut weight = nw.clone();
    for e in 0..m {
        let r = rep[e] as usize;
        if r != e {
            weight[r] += nw[e];
        }
    }
    let mut off = Vec::with_capacity(m + 1);
    off.push(0);
    let mut out_pins = Vec::with_capacity(pins.len());
    let mut out_w = Vec::with_capacity(m);
    for e in 0..m {
        if rep[e] as usize == e {
            out_pins.extend_from_slice(net(e));
            off.push(out_pins.len());
            out_w.push(weight[e]);
        }
    }
    (off, out_pins, out_w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hg(n: usize, nets: &[&[u32]]) -> Hg {
        let mut off = vec![0];
        let mut pins = Vec::new();
        for net in nets {
            pins.extend_from_slice(net);
            off.push(pins.len());
        }
        Hg::build(vec![1; n], off, pins, vec![1; nets.len()])
    }

    #[test]
    fn contraction_merges_pins_and_parallel_nets() {
        // Clusters {0,1}, {2}, {3}: net [0,1] collapses to one pin and is dropped; [0,2] and [1,2] become the
        // same coarse net of weight 2; [1,2,3] stays.
        let h = hg(4, &[&[0, 1], &[0, 2], &[1, 2], &[1, 2, 3]]);
        let c = h.contract(&[0, 0, 1, 2], 3);
        assert_eq!(c.vw, vec![2, 1, 1]);
        assert_eq!(c.m(), 2);
        assert_eq!((c.net(0), c.nw[0]), (&[0u32, 1][..], 2));
        assert_eq!((c.net(1), c.nw[1]), (&[0u32, 1, 2][..], 1));
        assert_eq!(c.nets_of(0), &[0, 1]);
        assert_eq!(c.total_w, 4);
    }

    #[test]
    fn a_side_keeps_nets_with_two_pins_there() {
        let h = hg(5, &[&[0, 1, 2], &[2, 3], &[3, 4, 0]]);
        let (s, ids) = h.side(&[0, 0, 1, 1, 1], 1);
        assert_eq!(ids, vec![2, 3, 4]);
        assert_eq!(s.m(), 2);
        assert_eq!(s.net(0), &[0, 1]);
        assert_eq!(s.net(1), &[1, 2]);
    }
}
