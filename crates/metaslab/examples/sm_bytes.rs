//! Space-structure bytes written per txg against pool size and fragmentation (issue
//! 12's benchmark; `bench/spacemap.sh` runs it and plots the CSV it prints).
//!
//! The allocator and the space-map structures run in memory, as the txg sync drives
//! them (`SpaceMap::sync_plan`, `sync_done`), without data I/O: what is measured is
//! the bytes of the blocks a sync would write for free-space accounting (log blocks,
//! flushed metaslab maps, directory pages, the root), which is what grows with the
//! pool's size if any structure is rewritten whole.
//!
//! For each vdev size: a *fresh* phase (empty pool, each txg allocates `--txg-mib` of
//! 128 KiB blocks and frees a quarter as many older ones), then a *fragmented* phase:
//! the pool is filled to 80% in 16 MiB allocations, a random half of its 1 MiB pieces
//! is freed, and the same txgs run again. Prints `phase,size_gib,txg,bytes,frag_pct`.
//!
//! Usage: `cargo run --release -p tarn-metaslab --example sm_bytes -- [--sizes-gib 64,256,1024,4096,16384] [--txgs 40] [--txg-mib 64]`

use tarn_metaslab::{alloc_one_copy as alloc_one, SpaceMap, VdevSpace};

const ALIGN_BYTES: u64 = 4096;
const BLOCK_BYTES: u64 = 128 << 10;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// One vdev's simulation: its map, the blocks allocated by the workload, the txg.
struct Sim {
    sm: SpaceMap,
    live: Vec<u64>,
    rng: Rng,
    size_gib: u64,
    txg: u64,
}

impl Sim {
    /// Sync the space structures of the current txg.
    fn sync(&mut self) {
        self.sm.sync_plan(self.txg, &mut alloc_one).expect("space for the space structures");
        self.sm.sync_done(self.txg);
    }

    /// Run `txgs` txgs of the workload (`txg_bytes` of 128 KiB allocations, a quarter
    /// as many frees of older blocks), printing one CSV line per txg.
    fn run_txgs(&mut self, phase: &str, txgs: u64, txg_bytes: u64) {
        for k in 1..=txgs {
            self.txg += 1;
            let n = txg_bytes / BLOCK_BYTES;
            for _ in 0..n {
                match self.sm.vdevs[0].alloc(BLOCK_BYTES) {
                    Some(off) => self.live.push(off),
                    None => break,
                }
            }
            for _ in 0..n / 4 {
                if self.live.is_empty() {
                    break;
                }
                let i = self.rng.below(self.live.len() as u64) as usize;
                let off = self.live.swap_remove(i);
                self.sm.vdevs[0].free(self.txg, off, BLOCK_BYTES);
            }
            self.sync();
            let frag = self.sm.fragmentation_pct().unwrap_or(0);
            println!("{phase},{},{k},{},{frag}", self.size_gib, self.sm.last_sync_bytes());
        }
    }
}

fn main() {
    let mut sizes_gib: Vec<u64> = vec![64, 256, 1024, 4096, 16384];
    let (mut txgs, mut txg_mib) = (40u64, 64u64);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--sizes-gib" => sizes_gib = v.split(',').map(|x| x.parse().expect("size in GiB")).collect(),
            "--txgs" => txgs = v.parse().expect("txg count"),
            "--txg-mib" => txg_mib = v.parse().expect("MiB per txg"),
            a => panic!("unknown argument {a}"),
        }
        i += 2;
    }
    println!("phase,size_gib,txg,bytes,frag_pct");
    for &g in &sizes_gib {
        let size = g << 30;
        let mut sim = Sim {
            sm: SpaceMap::new(vec![VdevSpace::new(size, ALIGN_BYTES)]),
            live: Vec::new(),
            rng: Rng(0x9e37_79b9_7f4a_7c15 ^ g),
            size_gib: g,
            txg: 0,
        };
        sim.run_txgs("fresh", txgs, txg_mib << 20);
        // Fill to 80% in 16 MiB pieces, then free a random half of the 1 MiB pieces.
        let mut pieces = Vec::new();
        while sim.sm.vdevs[0].alloc_bytes() < size / 10 * 8 {
            match sim.sm.vdevs[0].alloc(16 << 20) {
                Some(off) => pieces.push(off),
                None => break,
            }
        }
        sim.txg += 1;
        for p in &pieces {
            for k in 0..16u64 {
                if sim.rng.below(2) == 0 {
                    sim.sm.vdevs[0].free(sim.txg, p + (k << 20), 1 << 20);
                }
            }
        }
        sim.sync();
        eprintln!("{g} GiB: filled and fragmented, first sync wrote {} bytes", sim.sm.last_sync_bytes());
        // Let the deferred frees mature and the log flush settle before measuring.
        for _ in 0..8 {
            sim.txg += 1;
            sim.sync();
        }
        sim.run_txgs("fragmented", txgs, txg_mib << 20);
    }
}
