//! raidz parity math and column mapping, as pure functions (no I/O).
//!
//! Theory: a raidz block is a matrix of `n` columns × `rows` sectors. Columns
//! `0..p` hold parity, columns `p..n` hold data, filled column-major (data column `j`
//! holds bytes `[j*rows*s, (j+1)*rows*s)` of the zero-padded block). Over GF(2^8)
//! (polynomial x^8+x^4+x^3+x^2+1, `0x11d`) parity row `k` is
//! `Σ_j g_k^j · D_j` with `g = 1, 2, 4` for P, Q, R: P is plain XOR, Q and R are
//! Reed-Solomon syndromes. Any `e <= p` erased columns can be rebuilt: erased parity is
//! recomputed from data; erased data columns `m` are solved from `|m|` surviving
//! parity rows. The `|m| × |m|` matrix `A[r][i] = g_{k_r}^{m_i}` is a (generalised)
//! Vandermonde matrix with distinct nodes while `n - p <= 255`, so it is invertible;
//! [`reconstruct`] inverts it by Gauss-Jordan elimination and returns `Singular`
//! rather than panicking if that ever failed.
//!
//! Invariants: all columns of one block have equal length (asserted in
//! [`generate_parity`] and [`reconstruct`]); `1 <= p <= 3` and `p < n`.
//!
//! Called by: `tree` (raidz read/write), and tests. The parity math is written from
//! the algebra above, not taken from OpenZFS.

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
/// `1 << ashift` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Number of children (columns).
    pub ncols: usize,
    /// Parity columns, 1..=3.
    pub nparity: usize,
    /// Sector size in bytes.
    pub sector_bytes: u64,
}

impl Geometry {
    /// Allocated size for `psize_bytes` of data: whole rows of `ncols` sectors.
    pub fn asize_bytes(&self, psize_bytes: u64) -> u64 {
        self.rows(psize_bytes) * self.ncols as u64 * self.sector_bytes
    }
    /// Rows (sectors per column) that a block of `psize_bytes` occupies.
    pub fn rows(&self, psize_bytes: u64) -> u64 {
        let sectors = psize_bytes.div_ceil(self.sector_bytes);
        sectors.div_ceil((self.ncols - self.nparity) as u64)
    }
    /// Bytes per column for a block of `psize_bytes`.
    pub fn column_bytes(&self, psize_bytes: u64) -> usize {
        (self.rows(psize_bytes) * self.sector_bytes) as usize
    }
    /// All `ncols` columns of a block (parity first), ready to write.
    pub fn columns(&self, data: &[u8]) -> Vec<Vec<u8>> {
        let col = self.column_bytes(data.len() as u64);
        let ndata = self.ncols - self.nparity;
        let data_cols: Vec<Vec<u8>> = (0..ndata)
            .map(|j| {
                let mut c = vec![0u8; col];
                let lo = (j * col).min(data.len());
                let hi = ((j + 1) * col).min(data.len());
                c[..hi - lo].copy_from_slice(&data[lo..hi]);
                c
            })
            .collect();
        let refs: Vec<&[u8]> = data_cols.iter().map(|c| c.as_slice()).collect();
        let mut cols = generate_parity(&refs, self.nparity);
        cols.extend(data_cols);
        cols
    }
    /// The first `psize_bytes` of the data columns of `cols` (parity first).
    pub fn assemble(&self, cols: &[Vec<u8>], psize_bytes: u64) -> Vec<u8> {
        let mut out: Vec<u8> = cols[self.nparity..].concat();
        out.truncate(psize_bytes as usize);
        out
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
    fn geometry_mapping() {
        let g = Geometry {
            ncols: 5,
            nparity: 2,
            sector_bytes: 512,
        };
        assert_eq!(g.asize_bytes(1), 5 * 512);
        assert_eq!(g.asize_bytes(3 * 512), 5 * 512);
        assert_eq!(g.asize_bytes(3 * 512 + 1), 10 * 512);
        let data: Vec<u8> = (0..2000u32).map(|i| i as u8).collect();
        let cols = g.columns(&data);
        assert_eq!(cols.len(), 5);
        assert!(cols.iter().all(|c| c.len() == 1024));
        assert_eq!(&cols[2][..], &data[..1024]);
        assert_eq!(&cols[3][..976], &data[1024..]);
        assert!(cols[4].iter().all(|&b| b == 0));
        assert_eq!(g.assemble(&cols, 2000), data);
    }

    #[test]
    fn combinations_enumerate_subsets() {
        assert_eq!(combinations(&[1, 2, 3], 2), vec![vec![1, 2], vec![1, 3], vec![2, 3]]);
        assert_eq!(combinations(&[1, 2], 0), vec![Vec::<usize>::new()]);
        assert!(combinations(&[1], 2).is_empty());
    }

    #[test]
    fn too_many_erasures() {
        let g = Geometry {
            ncols: 4,
            nparity: 1,
            sector_bytes: 512,
        };
        let mut cols = g.columns(&[7u8; 1500]);
        assert_eq!(reconstruct(&mut cols, 1, &[1, 2]), Err(ReconstructError::TooManyErasures));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn reconstruct_any_erasures(
            n in 2usize..=10,
            p in 1usize..=3,
            data in proptest::collection::vec(any::<u8>(), 1..3000),
            seed in any::<u64>(),
        ) {
            prop_assume!(n > p);
            let g = Geometry { ncols: n, nparity: p, sector_bytes: 512 };
            let good = g.columns(&data);
            // Pick up to p distinct columns from the seed.
            let mut s = seed;
            let count = (s % (p as u64 + 1)) as usize;
            let mut erased = Vec::new();
            while erased.len() < count {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let c = (s >> 33) as usize % n;
                if !erased.contains(&c) {
                    erased.push(c);
                }
            }
            let mut cols = good.clone();
            for &c in &erased {
                cols[c].iter_mut().for_each(|b| *b = b.wrapping_add(0x5a));
            }
            reconstruct(&mut cols, p, &erased).unwrap();
            prop_assert_eq!(&cols, &good);
            prop_assert_eq!(g.assemble(&cols, data.len() as u64), data);
        }
    }
}
