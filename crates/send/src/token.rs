//! Resume tokens (`receive_resume_token`, `zfs send -t`).
//!
//! A token says where an interrupted receive stopped: every record for objects below
//! `object`, and every `WRITE`/`FREE` of `object` below `offset_bytes`, is in the
//! target. A sender given the token starts there; the receiver checks that the
//! resuming stream starts at the same place and belongs to the same to/from guids.
//!
//! Text form (OpenZFS-like, `1-<checksum>-<length>-<payload>`, all lower-case hex):
//! `1-` version, 16 hex digits of the first 8 bytes of BLAKE3(payload) as a LE u64,
//! `-`, the payload length in hex, `-`, the payload in hex. Payload (LE):
//! object u64 | offset_bytes u64 | bytes u64 | to_guid u64 | from_guid u64 |
//! name_len u32 | name.

use crate::stream::{NAME_MAX_BYTES, OBJECT_ID_END, OFFSET_END_BYTES};
use crate::{Result, SendError};

/// Where an interrupted receive stopped, and which stream it was receiving.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeToken {
    /// First object not completely received.
    pub object: u64,
    /// First byte of `object` not received.
    pub offset_bytes: u64,
    /// Stream bytes received before (for progress display only).
    pub bytes: u64,
    /// To-guid of the interrupted stream.
    pub to_guid: u64,
    /// From-guid of the interrupted stream (0 for a full stream).
    pub from_guid: u64,
    /// The stream's snapshot name.
    pub to_name: String,
}

const FIXED_BYTES: usize = 44;

impl ResumeToken {
    /// The token's text form.
    pub fn encode(&self) -> String {
        let mut p = Vec::with_capacity(FIXED_BYTES + self.to_name.len());
        for x in [self.object, self.offset_bytes, self.bytes, self.to_guid, self.from_guid] {
            p.extend_from_slice(&x.to_le_bytes());
        }
        p.extend_from_slice(&(self.to_name.len() as u32).to_le_bytes());
        p.extend_from_slice(self.to_name.as_bytes());
        let sum = u64::from_le_bytes(blake3::hash(&p).as_bytes()[..8].try_into().expect("8 bytes"));
        let hex: String = p.iter().map(|b| format!("{b:02x}")).collect();
        format!("1-{sum:016x}-{:x}-{hex}", p.len())
    }

    /// Parse a token's text form. Errors: `BadToken` naming the first check that
    /// failed (version, hex, length, checksum, field range).
    pub fn decode(s: &str) -> Result<ResumeToken> {
        let mut parts = s.trim().split('-');
        if parts.next() != Some("1") {
            return Err(SendError::BadToken("unknown version"));
        }
        let sum = parts.next().ok_or(SendError::BadToken("missing checksum"))?;
        let len = parts.next().ok_or(SendError::BadToken("missing length"))?;
        let hex = parts.next().ok_or(SendError::BadToken("missing payload"))?;
        if parts.next().is_some() {
            return Err(SendError::BadToken("trailing fields"));
        }
        let sum = u64::from_str_radix(sum, 16).map_err(|_| SendError::BadToken("checksum not hex"))?;
        let len = usize::from_str_radix(len, 16).map_err(|_| SendError::BadToken("length not hex"))?;
        if len > FIXED_BYTES + NAME_MAX_BYTES || hex.len() != 2 * len {
            return Err(SendError::BadToken("length does not match"));
        }
        let mut p = Vec::with_capacity(len);
        for i in 0..len {
            let byte = hex.get(2 * i..2 * i + 2).ok_or(SendError::BadToken("payload not hex"))?;
            p.push(u8::from_str_radix(byte, 16).map_err(|_| SendError::BadToken("payload not hex"))?);
        }
        if u64::from_le_bytes(blake3::hash(&p).as_bytes()[..8].try_into().expect("8 bytes")) != sum {
            return Err(SendError::BadToken("checksum mismatch"));
        }
        if p.len() < FIXED_BYTES {
            return Err(SendError::BadToken("too short"));
        }
        let u = |i: usize| u64::from_le_bytes(p[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        let name_len = u32::from_le_bytes(p[40..44].try_into().expect("4 bytes")) as usize;
        if name_len != p.len() - FIXED_BYTES {
            return Err(SendError::BadToken("name length does not match"));
        }
        let t = ResumeToken {
            object: u(0),
            offset_bytes: u(1),
            bytes: u(2),
            to_guid: u(3),
            from_guid: u(4),
            to_name: String::from_utf8(p[FIXED_BYTES..].to_vec()).map_err(|_| SendError::BadToken("name not UTF-8"))?,
        };
        if t.object >= OBJECT_ID_END || t.offset_bytes > OFFSET_END_BYTES {
            return Err(SendError::BadToken("position out of range"));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_roundtrip_and_damage() {
        let t = ResumeToken {
            object: 77,
            offset_bytes: 3 << 17,
            bytes: 123_456,
            to_guid: 0xdead_beef,
            from_guid: 0,
            to_name: "tank/fs@snap".into(),
        };
        let s = t.encode();
        assert!(s.starts_with("1-"));
        assert_eq!(ResumeToken::decode(&s).unwrap(), t);
        // Any changed character is refused, never a panic.
        for i in 0..s.len() {
            let mut b = s.clone().into_bytes();
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            let d = String::from_utf8(b).unwrap();
            if d != s {
                assert!(ResumeToken::decode(&d).is_err(), "position {i}");
            }
        }
        assert!(ResumeToken::decode("").is_err());
        assert!(ResumeToken::decode("1-0-0-").is_err());
        assert!(ResumeToken::decode("1-zz-ffffffffffffffff-00").is_err());
    }
}
