//! raidz parity math and block layout, as pure functions (no I/O).
//!
//! Theory — layout. A raidz top-level vdev of `n` children, `p` parity and sectors of
//! `2^ashift` bytes presents one linear address space of `n × child_size` bytes:
//! linear sector `x` is sector `x / n` of child `x % n`. A block of `psize` bytes
//! needs `s = ceil(psize / 2^ashift)` data sectors and is cut into `q = s / (n − p)`
//! full rows plus `r = s mod (n − p)` data sectors of a last, partial row. Every row
//! carries `p` parity sectors, so the block holds `tot = s + p·ceil(s / (n − p))`
//! sectors; its allocation is `tot` rounded up to a multiple of `p + 1` (the rounding
//! sectors are *skip* sectors: allocated, never written or read, contents undefined),
//! which is OpenZFS's `vdev_raidz_asize`. Rounding to `p + 1` keeps every free gap
//! able to hold at least the smallest block (one data plus `p` parity sectors).
//!
//! A block allocated at linear offset `o` (sector `b = o >> ashift`) occupies linear
//! sectors `[b, b + asize_sectors)`. Its map has columns `0..acols`, parity first:
//! column `c` lives on child `(b + c) mod n` starting at child sector
//! `b / n + (1 if (b mod n) + c >= n)`, i.e. map position (row `k`, column `c`) is
//! linear sector `b + k·n + c`. The first `bc = r ? r + p : 0` columns are *big*
//! (`q + 1` sectors), the rest small (`q` sectors); `acols = n` when `q > 0`, else
//! `bc` (a block smaller than a row touches only `r + p` children). The skip sectors
//! are the linear sectors `[b + tot, b + asize_sectors)`. This is OpenZFS's
//! `vdev_raidz_map_alloc` without its raidz1 "swap P every 1 MiB" quirk.
//!
//! Data columns `p..acols` hold the zero-padded payload in order: data column `j`
//! holds the payload sectors after those of data columns `0..j`.
//!
//! Theory — parity. Parity columns are as long as column 0 (`q + 1` sectors when
//! `r > 0`, else `q`); a shorter data column counts as zero-extended to that length.
//! Over GF(2^8) (polynomial x^8+x^4+x^3+x^2+1, `0x11d`) parity column `k` is
//! `Σ_j g_k^j · D_j` with `g = 1, 2, 4` for P, Q, R: P is plain XOR, Q and R are
//! Reed-Solomon syndromes. Any `e <= p` erased columns can be rebuilt: erased parity is
//! recomputed from data; erased data columns `m` are solved from `|m|` surviving
//! parity rows. The `|m| × |m|` matrix `A[r][i] = g_{k_r}^{m_i}` is a (generalised)
//! Vandermonde matrix with distinct nodes while `n - p <= 255`, so it is invertible;
//! [`reconstruct`] inverts it by Gauss-Jordan elimination and returns `Singular`
//! rather than panicking if that ever failed.
//!
//! Invariants: within [`reconstruct`] and [`generate_parity`] all columns have equal
//! length (asserted; [`Map`] pads and trims around them); `1 <= p <= 3` and `p < n`
//! (asserted by `tree::Vdev::new_raidz`); a [`Map`]'s columns are on distinct children
//! and its sizes sum to `tot` sectors (checked by the tests against an independent
//! model of the layout).
//!
//! Called by: `tree` (raidz read/write), `scan` (scrub/resilver extents), and tests.
//! The parity math and layout are written from the algebra above, not taken from
//! OpenZFS.

/// The irreducible polynomial of GF(2^8), x^8 + x^4 + x^3 + x^2 + 1.
const GF_POLY: u16 = 0x11d;

/// exp[i] = 2^i for i in 0..510 (doubled so `exp[log a + log b]` needs no modulo).
const GF_EXP: [u8; 512] = {
    let mut t = [0u8; 512];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        t[i] = x as u8;
        t[i + 255] = x as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= GF_POLY;
        }
        i += 1;
    }
    t[510] = t[0];
    t[511] = t[1];
    t
};

/// log[a] for a != 0 (log[0] is unused and left 0).
const GF_LOG: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        t[GF_EXP[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// Multiply in GF(2^8).
pub fn gf_mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    GF_EXP[GF_LOG[a as usize] as usize + GF_LOG[b as usize] as usize]
}

/// Multiplicative inverse in GF(2^8). Panics on 0 (a bug: 0 has no inverse).
pub fn gf_inv(a: u8) -> u8 {
    assert!(a != 0, "gf_inv(0)");
    GF_EXP[255 - GF_LOG[a as usize] as usize]
}

/// `g^e` in GF(2^8).
pub fn gf_pow(g: u8, e: usize) -> u8 {
    if g == 0 {
        return if e == 0 { 1 } else { 0 };
    }
    GF_EXP[(GF_LOG[g as usize] as usize * (e % 255)) % 255]
}

/// Generator of parity row `k` (0 = P, 1 = Q, 2 = R).
pub fn generator(k: usize) -> u8 {
    [1, 2, 4][k]
}

/// Coefficient of data column `j` in parity row `k`: `generator(k)^j`.
pub fn coef(k: usize, j: usize) -> u8 {
    gf_pow(generator(k), j)
}

/// `dst ^= c · src`, bytewise in GF(2^8).
fn mul_acc(dst: &mut [u8], c: u8, src: &[u8]) {
    debug_assert_eq!(dst.len(), src.len());
    match c {
        0 => {}
        1 => dst.iter_mut().zip(src).for_each(|(d, s)| *d ^= s),
        _ => {
            let lc = GF_LOG[c as usize] as usize;
            for (d, &s) in dst.iter_mut().zip(src) {
                if s != 0 {
                    *d ^= GF_EXP[GF_LOG[s as usize] as usize + lc];
                }
            }
        }
    }
}

/// Raidz geometry of one top-level vdev: `ncols` children, `nparity` parity, sector
/// `sector_bytes` (`1 << ashift`) bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Number of children.
    pub ncols: usize,
    /// Parity columns, 1..=3.
    pub nparity: usize,
    /// Sector size in bytes (a power of two).
    pub sector_bytes: u64,
}

/// Where one column of a block lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapColumn {
    /// Child index (`0..ncols`).
    pub child: usize,
    /// Offset of the column in the child's address space (bytes).
    pub child_offset_bytes: u64,
    /// Length of the column (bytes; whole sectors, never 0).
    pub size_bytes: u64,
}

/// The layout of one block: its columns in map order, parity first (see the module
/// theory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Map {
    /// Parity columns (the first `nparity` entries of `columns`).
    pub nparity: usize,
    /// Payload length (bytes).
    pub psize_bytes: u64,
    /// Allocated size, skip sectors included (bytes).
    pub asize_bytes: u64,
    /// Columns written for this block, parity first; `nparity + 1 ..= ncols` of them,
    /// on distinct children.
    pub columns: Vec<MapColumn>,
}

impl Geometry {
    fn sectors(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.sector_bytes)
    }

    /// Sectors holding data and parity for `psize_bytes`, skip sectors excluded:
    /// `s + p·ceil(s / (n − p))` with `s` data sectors.
    pub fn tot_sectors(&self, psize_bytes: u64) -> u64 {
        let s = self.sectors(psize_bytes);
        let (ndata, p) = ((self.ncols - self.nparity) as u64, self.nparity as u64);
        s + p * s.div_ceil(ndata)
    }

    /// Allocated size for `psize_bytes` of payload (bytes): [`Geometry::tot_sectors`]
    /// rounded up to a multiple of `nparity + 1` sectors (OpenZFS `vdev_raidz_asize`).
    pub fn asize_bytes(&self, psize_bytes: u64) -> u64 {
        let p1 = self.nparity as u64 + 1;
        self.tot_sectors(psize_bytes).div_ceil(p1) * p1 * self.sector_bytes
    }

    /// The layout of a block of `psize_bytes` (> 0) at linear offset `offset_bytes` (a
    /// multiple of the sector size; callers check both, a debug build asserts them).
    pub fn map(&self, offset_bytes: u64, psize_bytes: u64) -> Map {
        debug_assert!(offset_bytes.is_multiple_of(self.sector_bytes) && psize_bytes > 0);
        let n = self.ncols as u64;
        let p = self.nparity as u64;
        let b = offset_bytes / self.sector_bytes;
        let s = self.sectors(psize_bytes);
        let (q, r) = (s / (n - p), s % (n - p));
        let bc = if r == 0 { 0 } else { r + p };
        let acols = if q == 0 { bc } else { n };
        let (first, row) = (b % n, b / n);
        let columns = (0..acols)
            .map(|c| {
                let wrapped = first + c >= n;
                MapColumn {
                    child: ((first + c) % n) as usize,
                    child_offset_bytes: (row + u64::from(wrapped)) * self.sector_bytes,
                    size_bytes: (q + u64::from(c < bc)) * self.sector_bytes,
                }
            })
            .collect();
        Map {
            nparity: self.nparity,
            psize_bytes,
            asize_bytes: self.asize_bytes(psize_bytes),
            columns,
        }
    }
}

impl Map {
    /// Length of the parity columns (bytes), the longest column of the block.
    pub fn parity_bytes(&self) -> usize {
        self.columns[0].size_bytes as usize
    }

    /// Index of the map column stored on `child`, if the block has one there.
    pub fn column_on(&self, child: usize) -> Option<usize> {
        self.columns.iter().position(|c| c.child == child)
    }

    /// Every column of the block (parity first), ready to write. `data.len()` must be
    /// `psize_bytes` (asserted: a caller bug otherwise).
    pub fn encode(&self, data: &[u8]) -> Vec<Vec<u8>> {
        assert_eq!(data.len() as u64, self.psize_bytes, "raidz encode: wrong length");
        let len = self.parity_bytes();
        let mut at = 0usize;
        let data_cols: Vec<Vec<u8>> = self.columns[self.nparity..]
            .iter()
            .map(|col| {
                // Zero-extended to the parity length for the parity math.
                let mut c = vec![0u8; len];
                let lo = at.min(data.len());
                let hi = (at + col.size_bytes as usize).min(data.len());
                c[..hi - lo].copy_from_slice(&data[lo..hi]);
                at += col.size_bytes as usize;
                c
            })
            .collect();
        let refs: Vec<&[u8]> = data_cols.iter().map(|c| c.as_slice()).collect();
        let mut cols = generate_parity(&refs, self.nparity);
        cols.extend(data_cols);
        for (c, col) in cols.iter_mut().zip(&self.columns) {
            c.truncate(col.size_bytes as usize);
        }
        cols
    }

    /// The payload held by the data columns of `cols` (map order, parity first, each
    /// as long as its [`MapColumn::size_bytes`]; asserted).
    pub fn decode(&self, cols: &[Vec<u8>]) -> Vec<u8> {
        assert_eq!(cols.len(), self.columns.len(), "raidz decode: column count");
        let mut out = Vec::with_capacity(self.psize_bytes as usize);
        for (c, col) in cols.iter().zip(&self.columns).skip(self.nparity) {
            assert_eq!(c.len() as u64, col.size_bytes, "raidz decode: column length");
            out.extend_from_slice(c);
        }
        out.truncate(self.psize_bytes as usize);
        out
    }

    /// Rebuild the map columns listed in `erased` from the others, in place (see
    /// [`reconstruct`]); every column keeps its own length.
    pub fn reconstruct(&self, cols: &mut [Vec<u8>], erased: &[usize]) -> Result<(), ReconstructError> {
        assert_eq!(cols.len(), self.columns.len(), "raidz reconstruct: column count");
        let len = self.parity_bytes();
        let mut full: Vec<Vec<u8>> = cols
            .iter()
            .map(|c| {
                let mut f = c.clone();
                f.resize(len, 0);
                f
            })
            .collect();
        reconstruct(&mut full, self.nparity, erased)?;
        for ((c, f), col) in cols.iter_mut().zip(full).zip(&self.columns) {
            *c = f;
            c.truncate(col.size_bytes as usize);
        }
        Ok(())
    }
}

/// Parity columns (P, Q, R up to `nparity`) for equal-length data columns.
pub fn generate_parity(data: &[&[u8]], nparity: usize) -> Vec<Vec<u8>> {
    assert!((1..=3).contains(&nparity), "nparity {nparity}");
    let len = data.first().map_or(0, |d| d.len());
    assert!(data.iter().all(|d| d.len() == len), "unequal columns");
    (0..nparity)
        .map(|k| {
            let mut p = vec![0u8; len];
            for (j, d) in data.iter().enumerate() {
                mul_acc(&mut p, coef(k, j), d);
            }
            p
        })
        .collect()
}

/// Why a reconstruction could not be attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconstructError {
    /// More missing data columns than surviving parity columns.
    TooManyErasures,
    /// The parity matrix was singular (cannot happen for `n - p <= 255`).
    Singular,
}

/// Rebuild the columns listed in `erased` (indices into `cols`, parity first) from the
/// others, in place. After `Ok`, every column of `cols` is consistent. Columns not in
/// `erased` are trusted as they are.
pub fn reconstruct(cols: &mut [Vec<u8>], nparity: usize, erased: &[usize]) -> Result<(), ReconstructError> {
    assert!((1..=3).contains(&nparity) && cols.len() > nparity);
    let len = cols[0].len();
    assert!(cols.iter().all(|c| c.len() == len), "unequal columns");
    let ndata = cols.len() - nparity;
    let mut missing: Vec<usize> = erased.iter().filter(|&&c| c >= nparity).map(|&c| c - nparity).collect();
    missing.sort_unstable();
    missing.dedup();
    let avail_parity: Vec<usize> = (0..nparity).filter(|k| !erased.contains(k)).collect();
    let m = missing.len();
    if m > avail_parity.len() {
        return Err(ReconstructError::TooManyErasures);
    }
    if m > 0 {
        let rows = &avail_parity[..m];
        // Syndromes: parity minus the contribution of the known data columns.
        let mut synd: Vec<Vec<u8>> = rows.iter().map(|&k| cols[k].clone()).collect();
        for (r, &k) in rows.iter().enumerate() {
            for j in (0..ndata).filter(|j| !missing.contains(j)) {
                mul_acc(&mut synd[r], coef(k, j), &cols[nparity + j]);
            }
        }
        let a: Vec<Vec<u8>> = rows.iter().map(|&k| missing.iter().map(|&j| coef(k, j)).collect()).collect();
        let inv = invert(a).ok_or(ReconstructError::Singular)?;
        for (i, &j) in missing.iter().enumerate() {
            let mut d = vec![0u8; len];
            for (r, s) in synd.iter().enumerate() {
                mul_acc(&mut d, inv[i][r], s);
            }
            cols[nparity + j] = d;
        }
    }
    let erased_parity: Vec<usize> = (0..nparity).filter(|k| erased.contains(k)).collect();
    if !erased_parity.is_empty() {
        let refs: Vec<&[u8]> = cols[nparity..].iter().map(|c| c.as_slice()).collect();
        let parity = generate_parity(&refs, nparity);
        for k in erased_parity {
            cols[k] = parity[k].clone();
        }
    }
    Ok(())
}

/// Invert a square matrix over GF(2^8) by Gauss-Jordan elimination; None if singular.
fn invert(mut a: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    let n = a.len();
    let mut inv: Vec<Vec<u8>> = (0..n).map(|i| (0..n).map(|j| u8::from(i == j)).collect()).collect();
    for col in 0..n {
        let pivot = (col..n).find(|&r| a[r][col] != 0)?;
        a.swap(col, pivot);
        inv.swap(col, pivot);
        let f = gf_inv(a[col][col]);
        for j in 0..n {
            a[col][j] = gf_mul(a[col][j], f);
            inv[col][j] = gf_mul(inv[col][j], f);
        }
        for r in 0..n {
            let f = a[r][col];
            if r != col && f != 0 {
                for j in 0..n {
                    a[r][j] ^= gf_mul(f, a[col][j]);
                    inv[r][j] ^= gf_mul(f, inv[col][j]);
                }
            }
        }
    }
    Some(inv)
}

/// All `k`-element subsets of `items`, in lexicographic order of positions.
pub fn combinations(items: &[usize], k: usize) -> Vec<Vec<usize>> {
    fn go(items: &[usize], k: usize, start: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..items.len() {
            cur.push(items[i]);
            go(items, k, i + 1, cur, out);
            cur.pop();
        }
    }
    let mut out = Vec::new();
    if k <= items.len() {
        go(items, k, 0, &mut Vec::new(), &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Carry-less multiply then reduce: the definition, to check the tables against.
    fn slow_mul(a: u8, b: u8) -> u8 {
        let mut r: u16 = 0;
        let (mut a, mut b) = (a as u16, b);
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            a <<= 1;
            if a & 0x100 != 0 {
                a ^= GF_POLY;
            }
            b >>= 1;
        }
        r as u8
    }

    #[test]
    fn field_tables_match_definition() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(gf_mul(a, b), slow_mul(a, b), "{a}*{b}");
            }
            if a != 0 {
                assert_eq!(gf_mul(a, gf_inv(a)), 1);
            }
        }
        assert_eq!(gf_pow(2, 8), 0x1d);
        assert_eq!(gf_pow(4, 4), 0x1d);
        assert_eq!(gf_pow(2, 255), 1);
    }

    #[test]
    fn parity_values() {
        let d0 = [1u8, 0x80];
        let d1 = [3u8, 0x80];
        let p = generate_parity(&[&d0, &d1], 3);
        assert_eq!(p[0], vec![1 ^ 3, 0]);
        assert_eq!(p[1], vec![1 ^ gf_mul(2, 3), 0x80 ^ 0x1d]);
        assert_eq!(p[2], vec![1 ^ gf_mul(4, 3), 0x80 ^ gf_mul(4, 0x80)]);
    }

    #[test]
    fn combinations_enumerate_subsets() {
        assert_eq!(combinations(&[1, 2, 3], 2), vec![vec![1, 2], vec![1, 3], vec![2, 3]]);
        assert_eq!(combinations(&[1, 2], 0), vec![Vec::<usize>::new()]);
        assert!(combinations(&[1], 2).is_empty());
    }

    fn geometry(n: usize, p: usize, ashift: u32) -> Geometry {
        Geometry {
            ncols: n,
            nparity: p,
            sector_bytes: 1 << ashift,
        }
    }

    /// OpenZFS's allocated size, derived independently of the code under test: fill
    /// rows of at most `n − p` data sectors one at a time, add `p` parity sectors per
    /// row, then pad the total with skip sectors to a multiple of `p + 1`.
    fn model_asize_bytes(psize_bytes: u64, ashift: u32, n: u64, p: u64) -> u64 {
        let mut data_left = (psize_bytes + (1 << ashift) - 1) >> ashift;
        let mut total = 0;
        while data_left > 0 {
            let in_row = data_left.min(n - p);
            total += in_row + p;
            data_left -= in_row;
        }
        while total % (p + 1) != 0 {
            total += 1;
        }
        total << ashift
    }

    /// Block sizes from 512 B to 16 MiB: powers of two, odd sector counts, and byte
    /// counts just over a sector boundary.
    fn test_sizes_bytes() -> Vec<u64> {
        let mut v: Vec<u64> = (9..=24).map(|k| 1u64 << k).collect();
        for sectors in [1u64, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 33, 37, 63, 65, 127, 129, 255, 257, 1023, 4097, 32767] {
            v.push(sectors * 512);
            v.push(sectors * 4096);
            v.push(sectors * 512 + 1);
            v.push(sectors * 4096 - 7);
        }
        v.push(1);
        v.push((16 << 20) - 1);
        v
    }

    #[test]
    fn asize_matches_openzfs_for_every_width_and_size() {
        for p in 1..=3u64 {
            for n in p + 1..=20 {
                for ashift in [9u32, 12] {
                    let g = geometry(n as usize, p as usize, ashift);
                    for &psize in &test_sizes_bytes() {
                        let want = model_asize_bytes(psize, ashift, n, p);
                        assert_eq!(g.asize_bytes(psize), want, "raidz{p} n={n} ashift={ashift} psize={psize}");
                        assert_eq!(g.asize_bytes(psize) % ((p + 1) << ashift), 0);
                    }
                }
            }
        }
        // A few values worked by hand (ashift 12).
        assert_eq!(geometry(4, 1, 12).asize_bytes(4096), 8192, "1 data + 1 parity");
        assert_eq!(geometry(4, 1, 12).asize_bytes(8192), 16384, "2 data + 1 parity + 1 skip");
        assert_eq!(geometry(6, 2, 12).asize_bytes(128 << 10), 192 << 10, "32 data + 16 parity");
        assert_eq!(geometry(5, 1, 12).asize_bytes(128 << 10), 160 << 10, "32 data + 8 parity");
        assert_eq!(geometry(5, 2, 12).asize_bytes(65536), 120 << 10, "16 + 12 parity + 2 skip");
    }

    /// Check a map against the layout model: map position (row k, column c) is linear
    /// sector `b + k·n + c`, which lives on child `(b + k·n + c) mod n` at child sector
    /// `(b + k·n + c) / n`; the positions used are exactly `[b, b + tot)`; big columns
    /// come first; sizes add up; children are distinct.
    fn check_map(g: &Geometry, offset_bytes: u64, psize_bytes: u64) {
        let m = g.map(offset_bytes, psize_bytes);
        let (n, sb) = (g.ncols as u64, g.sector_bytes);
        let b = offset_bytes / sb;
        let tot = g.tot_sectors(psize_bytes);
        let mut seen = Vec::new();
        for (c, col) in m.columns.iter().enumerate() {
            assert!(col.size_bytes > 0 && col.size_bytes % sb == 0);
            for k in 0..col.size_bytes / sb {
                let linear = b + k * n + c as u64;
                assert_eq!(col.child as u64, linear % n, "column {c} child");
                assert_eq!(col.child_offset_bytes / sb + k, linear / n, "column {c} row {k}");
                seen.push(linear);
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (b..b + tot).collect::<Vec<u64>>(), "positions of {psize_bytes} at {offset_bytes}");
        assert!(m.columns.windows(2).all(|w| w[0].size_bytes >= w[1].size_bytes), "big columns first");
        let data: u64 = m.columns[m.nparity..].iter().map(|c| c.size_bytes).sum();
        assert_eq!(data, psize_bytes.div_ceil(sb) * sb);
        assert!(m.columns.iter().all(|c| c.size_bytes <= m.columns[0].size_bytes));
        let mut kids: Vec<usize> = m.columns.iter().map(|c| c.child).collect();
        kids.sort_unstable();
        kids.dedup();
        assert_eq!(kids.len(), m.columns.len(), "distinct children");
        assert!(m.columns.len() > m.nparity && m.columns.len() <= g.ncols);
        assert_eq!(m.asize_bytes, g.asize_bytes(psize_bytes));
    }

    #[test]
    fn map_layout_matches_model_from_every_start_child() {
        for p in 1..=3usize {
            for n in [p + 1, p + 2, 5, 7, 12, 20] {
                let g = geometry(n, p, 9);
                for &psize in test_sizes_bytes().iter().filter(|&&s| s <= 1 << 20) {
                    for start in 0..2 * n as u64 + 1 {
                        check_map(&g, (1000 + start) * 512, psize);
                    }
                }
            }
        }
    }

    #[test]
    fn worked_example_from_format_doc() {
        // docs/format.md §5: raidz2, 5 children, ashift 12, a 26 000-byte block at
        // offset 0x9000 (linear sector 9): 7 data sectors, 6 parity, 2 skip.
        let g = geometry(5, 2, 12);
        let m = g.map(0x9000, 26_000);
        assert_eq!(g.tot_sectors(26_000), 13);
        assert_eq!(m.asize_bytes, 15 * 4096);
        let got: Vec<(usize, u64, u64)> = m.columns.iter().map(|c| (c.child, c.child_offset_bytes / 4096, c.size_bytes / 4096)).collect();
        assert_eq!(got, vec![(4, 1, 3), (0, 2, 3), (1, 2, 3), (2, 2, 2), (3, 2, 2)]);
        let data: Vec<u8> = (0..26_000u32).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect();
        let cols = m.encode(&data);
        assert_eq!(&cols[2][..], &data[..12288]);
        assert_eq!(&cols[3][..], &data[12288..20480]);
        assert_eq!(&cols[4][..5520], &data[20480..]);
        assert!(cols[4][5520..].iter().all(|&b| b == 0) && cols[4].len() == 8192);
        // P's third sector covers data column 0 alone (the others are short).
        assert_eq!(&cols[0][8192..], &data[8192..12288]);
        assert_eq!(m.decode(&cols), data);
    }

    #[test]
    fn small_block_uses_only_its_columns() {
        let g = geometry(8, 2, 9);
        let m = g.map(7 * 512, 1000);
        let got: Vec<(usize, u64, u64)> = m.columns.iter().map(|c| (c.child, c.child_offset_bytes, c.size_bytes)).collect();
        assert_eq!(got, vec![(7, 0, 512), (0, 512, 512), (1, 512, 512), (2, 512, 512)]);
        assert_eq!(m.asize_bytes, 6 * 512, "4 written + 2 skip");
        assert_eq!(m.column_on(0), Some(1));
        assert_eq!(m.column_on(5), None);
    }

    #[test]
    fn too_many_erasures() {
        let g = geometry(4, 1, 9);
        let m = g.map(0, 1500);
        let mut cols = m.encode(&[7u8; 1500]);
        assert_eq!(m.reconstruct(&mut cols, &[1, 2]), Err(ReconstructError::TooManyErasures));
    }

    /// Distinct column indices below `ncols`, `count` of them, chosen by `seed`.
    fn pick(seed: u64, count: usize, ncols: usize) -> Vec<usize> {
        let mut s = seed;
        let mut out = Vec::new();
        while out.len() < count.min(ncols) {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let c = (s >> 33) as usize % ncols;
            if !out.contains(&c) {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn every_erasure_combination_rebuilds() {
        for p in 1..=3usize {
            for n in p + 1..=9 {
                let g = geometry(n, p, 9);
                for psize in [1u64, 512, 513, 1500, 4096, 5 * 512 + 3, 9000] {
                    for start in 0..n as u64 {
                        let m = g.map(start * 512, psize);
                        let data: Vec<u8> = (0..psize).map(|i| (i * 7 + start) as u8).collect();
                        let good = m.encode(&data);
                        let idx: Vec<usize> = (0..good.len()).collect();
                        for k in 0..=p {
                            for erased in combinations(&idx, k) {
                                let mut cols = good.clone();
                                for &c in &erased {
                                    cols[c].iter_mut().for_each(|b| *b ^= 0xa5);
                                }
                                m.reconstruct(&mut cols, &erased).unwrap();
                                assert_eq!(cols, good, "raidz{p} n={n} psize={psize} start={start} erased {erased:?}");
                                assert_eq!(m.decode(&cols), data);
                            }
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        #[test]
        fn reconstruct_any_erasures(
            n in 2usize..=20,
            p in 1usize..=3,
            ashift in prop_oneof![Just(9u32), Just(12u32)],
            data in proptest::collection::vec(any::<u8>(), 1..40_000),
            start_sector in 0u64..1000,
            seed in any::<u64>(),
        ) {
            prop_assume!(n > p);
            let g = geometry(n, p, ashift);
            let m = g.map(start_sector << ashift, data.len() as u64);
            check_map(&g, start_sector << ashift, data.len() as u64);
            let good = m.encode(&data);
            let erased = pick(seed, (seed % (p as u64 + 1)) as usize, good.len());
            let mut cols = good.clone();
            for &c in &erased {
                cols[c].iter_mut().for_each(|b| *b = b.wrapping_add(0x5a));
            }
            m.reconstruct(&mut cols, &erased).unwrap();
            prop_assert_eq!(&cols, &good);
            prop_assert_eq!(m.decode(&cols), data);
        }
    }
}
