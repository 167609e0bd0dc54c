//! The host-wide `l2arc_write_max`/`l2arc_write_boost` (`tarn daemon --set`) bound
//! what every pool's next feed writes. Its own test binary: the tunables are
//! process-wide.

mod common;

use common::{data_props, leaf, zio_over};
use std::sync::Arc;
use tarn_zio::WriteProps;

#[test]
fn host_wide_write_limits_bound_each_feed() {
    let dir = tempfile::tempdir().unwrap();
    let a = leaf(&dir, "data", 100, 80 << 20);
    let zio = Arc::new(zio_over(a, 64 << 20));
    zio.add_cache_device(leaf(&dir, "cache", 900, 64 << 20), false, 0);
    let props = data_props(5);
    let items: Vec<(Arc<Vec<u8>>, WriteProps)> = (0..32u8).map(|i| (Arc::new(vec![i + 1; 64 << 10]), props)).collect();
    for r in zio.write_blocks(&items, 2) {
        r.unwrap();
    }
    tarn_zio::l2arc::set_write_limits(Some(128 << 10), Some(128 << 10));
    assert_eq!(tarn_zio::l2arc::write_limits(), (128 << 10, 128 << 10));
    let n = zio.l2arc_feed();
    assert!(n > 128 << 10 && n <= (256 << 10) + 8192, "a feed wrote {n} bytes");
    // 0 restores the defaults (8 MiB each).
    tarn_zio::l2arc::set_write_limits(Some(0), Some(0));
    assert_eq!(tarn_zio::l2arc::write_limits(), (8 << 20, 8 << 20));
    assert!(zio.l2arc_feed() > 1 << 20, "the rest went in one feed");
}
