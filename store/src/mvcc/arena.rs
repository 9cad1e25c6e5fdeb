//! Where the state machine keeps small keys and values: packed one after another into
//! 64 KiB chunks, each a slice (`Bytes`) of its chunk, instead of one heap allocation each.
//!
//! A value applied from a Raft entry used to stay a slice of that entry, whose allocation
//! the allocator rounds up to its size class (a 1.6 KB entry takes 1,792 bytes) and whose
//! other bytes (the key, the request's framing) stay alive with it. Packed, a 1 KiB
//! ConfigMap costs its bytes and nothing more once the Raft log lets its entry go. A chunk
//! is freed when the last key or value in it is dropped (compaction, deletion); a chunk is
//! no larger than one of the allocator's own pages for small objects, so a few survivors
//! pin no more memory than they would have scattered over the allocator's pages.

use bytes::{Bytes, BytesMut};

/// Size of a chunk.
const CHUNK: usize = 64 * 1024;
/// Larger values get an allocation of their own (the caller shares them when it can).
pub(super) const MAX_PACKED: usize = 8 * 1024;

/// The chunk being filled.
#[derive(Debug, Default)]
pub(super) struct Arena {
    chunk: BytesMut,
}

impl Arena {
    /// `bytes`, copied into the current chunk (or, when larger than [`MAX_PACKED`], into an
    /// allocation of its own).
    pub(super) fn store(&mut self, bytes: &[u8]) -> Bytes {
        if bytes.is_empty() {
            return Bytes::new();
        }
        if bytes.len() > MAX_PACKED {
            return Bytes::copy_from_slice(bytes);
        }
        if self.chunk.capacity() - self.chunk.len() < bytes.len() {
            self.chunk = BytesMut::with_capacity(CHUNK);
        }
        self.chunk.extend_from_slice(bytes);
        self.chunk.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_share_a_chunk_and_outlive_it() {
        let mut arena = Arena::default();
        let a = arena.store(b"first");
        let b = arena.store(b"second");
        assert_eq!((a.as_ref(), b.as_ref()), (&b"first"[..], &b"second"[..]));
        // Packed back to back in one chunk.
        assert_eq!(a.as_ptr() as usize + a.len(), b.as_ptr() as usize);
        assert!(arena.store(b"").is_empty());
        let big = vec![b'x'; MAX_PACKED + 1];
        assert_eq!(arena.store(&big).as_ref(), big.as_slice());
        // A full chunk is replaced; earlier slices stay valid after the arena is gone.
        let filler = vec![b'y'; MAX_PACKED];
        let many: Vec<Bytes> = (0..(2 * CHUNK / MAX_PACKED))
            .map(|_| arena.store(&filler))
            .collect();
        drop(arena);
        assert!(many.iter().all(|v| v.as_ref() == filler.as_slice()));
        assert_eq!(a.as_ref(), b"first");
    }
}
