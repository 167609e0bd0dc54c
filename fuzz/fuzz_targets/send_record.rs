//! Send streams: one record payload decoded by type (`Record::decode`, what follows
//! the per-record checksum), a whole stream through `StreamReader` (prefix, BEGIN,
//! records, checksums), a resume token and a package header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tarn_send::{read_package, Record, ResumeToken, StreamReader};

fuzz_target!(|data: &[u8]| {
    if data.len() >= 2 {
        let t = u16::from_le_bytes([data[0], data[1]]);
        if let Ok(r) = Record::decode(t, &data[2..]) {
            // An accepted record encodes again (to its canonical payload).
            let _ = r.encode_payload();
        }
    }
    if let Ok(mut rd) = StreamReader::new(data) {
        for _ in 0..1024 {
            if rd.next_record().is_err() {
                break;
            }
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = ResumeToken::decode(s);
    }
    let _ = read_package(&mut &data[..]);
});
