//! The space-map decoders (metaslab directory root, pages, condensed maps, log
//! blocks) fed random and mutated bytes, as the `space_map` fuzz target does: each
//! returns `Ok` or `Corrupt`, never panics or allocates from an unchecked count, and
//! an accepted root encodes back to itself.

use proptest::prelude::*;
use tarn_metaslab::ondisk::*;
use tarn_metaslab::{AllocClass, LogRecord, RecordKind};
use tarn_phys::BlkPtr;

fn check_all(b: &[u8]) {
    if let Ok(r) = RootPhys::decode(b) {
        assert_eq!(RootPhys::decode(&r.encode()).unwrap(), r);
    }
    if let Ok(p) = PagePhys::decode(b) {
        assert_eq!(PagePhys::decode(&p.encode()).unwrap(), p);
    }
    if let Ok(m) = MapPhys::decode(b) {
        let _ = MapPhys::chain_trees(std::slice::from_ref(&m), m.start_bytes, m.size_bytes, 512);
    }
    if let Ok(l) = LogBlockPhys::decode(b) {
        assert_eq!(LogBlockPhys::decode(&l.encode()).unwrap(), l);
    }
}

fn valid_blocks() -> Vec<Vec<u8>> {
    let root = RootPhys {
        txg: 9,
        log_tail_txg: 3,
        log_head: BlkPtr::HOLE,
        vdevs: vec![RootVdevPhys {
            class: AllocClass::Normal,
            asize_bytes: 1 << 30,
            ms_shift: 24,
            ms_count: 64,
            pages: [BlkPtr::HOLE; tarn_metaslab::DIR_PAGES],
        }],
    };
    let page = PagePhys {
        vdev: 0,
        page: 0,
        first_ms: 0,
        entries: vec![(7, BlkPtr::HOLE); 4],
    };
    let map = MapPhys {
        vdev: 0,
        ms_index: 0,
        start_bytes: 0,
        size_bytes: 1 << 24,
        flush_txg: 7,
        chunk: 0,
        next: BlkPtr::HOLE,
        free: vec![(0, 4096), (8192, 4096)],
        deferred: vec![(6, 1 << 20, 4096)],
    };
    let log = LogBlockPhys {
        txg: 9,
        prev: BlkPtr::HOLE,
        records: vec![LogRecord {
            vdev: 0,
            kind: RecordKind::Alloc,
            start_bytes: 4096,
            len_bytes: 8192,
            txg: 9,
        }],
    };
    vec![root.encode(), page.encode(), map.encode(), log.encode()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..3000)) {
        check_all(&b);
    }

    #[test]
    fn mutated_blocks_never_panic(which in 0usize..4, edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let mut b = valid_blocks().swap_remove(which);
        let n = b.len();
        for (i, v) in edits {
            b[i % n] = v;
        }
        check_all(&b);
    }
}
