//! fletcher4's speed on this machine: a 128 KiB block in cache and 256 MiB streamed
//! from memory, two passes each, in GB/s. `cargo run --release -p tarn-phys --example
//! fletcher4_speed`; `bench/README.md` has the numbers of the lane-sum changes.

use std::time::Instant;

fn main() {
    for (len_bytes, passes) in [(128usize << 10, 20_000usize), (256 << 20, 10)] {
        let data: Vec<u8> = (0..len_bytes as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for _ in 0..2 {
            let t = Instant::now();
            let mut fold = 0u8;
            for _ in 0..passes {
                fold ^= tarn_phys::checksum::fletcher4(std::hint::black_box(&data))[0];
            }
            let s = t.elapsed().as_secs_f64();
            println!("{len_bytes} bytes: {:.2} GB/s (fold {fold})", (passes * len_bytes) as f64 / s / 1e9);
        }
    }
}
