//! The pool directory's record decoders (dataset record, property list, bookmark list,
//! scan record) fed random bytes and mutations of valid encodings, as the
//! `pool_records` fuzz target does: each returns a value or an error, never panics,
//! and what it accepts round-trips (checked inside `fuzzing::pool_records`).

use tarn_spa::fuzzing::{pool_records, record_seeds};

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn random_bytes_never_panic() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..20_000 {
        let len = (xorshift(&mut x) % 600) as usize;
        let b: Vec<u8> = (0..len).map(|_| xorshift(&mut x) as u8).collect();
        pool_records(&b);
    }
}

#[test]
fn mutated_valid_records_never_panic() {
    let seeds = record_seeds();
    // The seeds themselves decode (so the mutations start past the first checks).
    for s in &seeds {
        pool_records(s);
    }
    let mut x = 0x0123_4567_89ab_cdefu64;
    for _ in 0..20_000 {
        let mut b = seeds[(xorshift(&mut x) % seeds.len() as u64) as usize].clone();
        for _ in 0..1 + xorshift(&mut x) % 4 {
            let r = xorshift(&mut x);
            match r % 4 {
                0 if !b.is_empty() => {
                    let i = (r >> 8) as usize % b.len();
                    b[i] ^= (r >> 40) as u8 | 1;
                }
                1 => b.truncate((r >> 8) as usize % (b.len() + 1)),
                2 => b.extend(std::iter::repeat_n((r >> 8) as u8, (r >> 16) as usize % 16)),
                _ if b.len() >= 4 => {
                    let i = (r >> 8) as usize % (b.len() - 3);
                    b[i..i + 4].copy_from_slice(&((r >> 32) as u32).to_le_bytes());
                }
                _ => {}
            }
        }
        pool_records(&b);
    }
}
