//! A write-path hook for crafting corrupted pools (the image fuzzer, `crates/fuzzing`).
//!
//! Theory: the decoders above zio only ever see blocks whose checksums verified, so a
//! fuzzer that flips bytes on the device only exercises checksum failure. To reach the
//! decoders with damaged metadata, the damage has to be sealed: its checksum computed
//! over the damaged bytes and stored in the parent pointer, and so on up to the
//! uberblock. The write path already does exactly that for every block it writes, so
//! the hook sits there: a mutator installed with [`set_write_mutator`] may change the
//! logical bytes of a block just before it is compressed and checksummed. The pool
//! written while it is installed is a validly sealed, crafted pool; the in-memory
//! state that wrote it is not damaged, so the damage is met only after an export and
//! an import.
//!
//! Invariant: with no mutator installed (the only state outside the fuzzer) the hook
//! costs one relaxed atomic load per block and changes nothing.
//!
//! Called by: `aggregate::prepare` (every block write); installed by the image fuzzer.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tarn_phys::ObjectType;

/// A block mutator: called with the block's object type, its indirection level and
/// its logical bytes, which it may change in place (length included, up to the
/// type's largest block, `ObjectType::lsize_max_bytes`; an empty or larger result is
/// ignored).
pub type WriteMutator = Arc<dyn Fn(ObjectType, u8, &mut Vec<u8>) + Send + Sync>;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static MUTATOR: parking_lot::RwLock<Option<WriteMutator>> = parking_lot::RwLock::new(None);

/// Install (`Some`) or remove (`None`) the process-wide write mutator. For fuzzing and
/// crafted-pool tests only: every pool written by this process while it is installed
/// gets the mutated blocks.
#[doc(hidden)]
pub fn set_write_mutator(m: Option<WriteMutator>) {
    let mut g = MUTATOR.write();
    INSTALLED.store(m.is_some(), Ordering::SeqCst);
    *g = m;
}

/// Whether a mutator is installed (the bytes written may differ from the caller's).
pub(crate) fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// The bytes to write for `data`: `data` itself unless a mutator is installed and
/// changes them.
pub(crate) fn mutate<'a>(data: &'a [u8], otype: ObjectType, level: u8) -> Cow<'a, [u8]> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return Cow::Borrowed(data);
    }
    let Some(m) = MUTATOR.read().clone() else { return Cow::Borrowed(data) };
    let mut v = data.to_vec();
    m(otype, level, &mut v);
    if v.is_empty() || v.len() > otype.lsize_max_bytes() as usize {
        return Cow::Borrowed(data);
    }
    Cow::Owned(v)
}
