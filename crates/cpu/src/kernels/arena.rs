//! One memory map for many packed matrices, so that they all sit in
//! transparent huge pages.
//!
//! Linux backs an anonymous map with 2 MB pages only over the aligned
//! 2 MB spans inside it. With one map per matrix, a matrix under 2 MB
//! (each of Gemma 3 270M's per-layer matrices) gets none, and every
//! larger one loses a partial span at each end: 203 of the
//! Llama-3.2-1B-shaped file's 801 MB stayed in 4 KiB pages. On a virtual
//! machine each TLB miss is a nested page walk, and two threads read 4
//! KiB pages ~25% slower than huge ones (`membw`). Here matrices are laid
//! back to back in 256 MB chunks that start on a 2 MB boundary, so only
//! the partial span at a chunk's end is lost (and it is at most 2 MB of
//! memory either way).
//!
//! A region is never reused: the chunk is unmapped when the last region
//! cut from it is dropped (the allocator holds only a weak reference), so
//! a model's chunks go with its matrices. A model loaded while another
//! is alive (a draft model) starts in the other's last chunk, which then
//! stays mapped until both are dropped.
//!
//! One of the two places outside the SIMD modules that allow `unsafe`
//! (with `panel_out.rs`): safe Rust cannot hand out `&mut` access to
//! disjoint parts of one map that different owners drop at different
//! times, so each region writes through the chunk's base pointer, within
//! its own range.
#![allow(unsafe_code)]

use std::sync::{Arc, Mutex, Weak};

/// Bytes a chunk reserves (virtual memory: only the pages written take
/// memory).
const CHUNK: usize = 256 << 20;
/// The huge page size, to which chunks are aligned.
const HUGE: usize = 2 << 20;
/// Alignment of every region (a cache line: the kernels' loads).
const ALIGN: usize = 64;

/// An anonymous map and its first 2 MB-aligned byte.
struct Chunk {
    /// Kept for its `Drop` (the unmap); never read as a whole, because
    /// regions of it are written through `base` by their owners.
    _map: memmap2::MmapMut,
    base: *mut u8,
    len: usize,
}

// SAFETY: `base` points into `_map`, which lives as long as the chunk.
// The chunk itself is never read or written through; each `Region` owns a
// disjoint range of it and lends it out under Rust's borrow rules.
unsafe impl Send for Chunk {}
// SAFETY: as for `Send`: shared `&Chunk`s give access to nothing but
// `base` and `len`.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// A chunk of at least `len` usable bytes, or `None` where the OS
    /// refuses the map.
    fn new(len: usize) -> Option<Arc<Chunk>> {
        let mut map = memmap2::MmapMut::map_anon(len.checked_add(HUGE)?).ok()?;
        #[cfg(target_os = "linux")]
        let _ = map.advise(memmap2::Advice::HugePage);
        let skip = map.as_ptr().align_offset(HUGE).min(HUGE);
        // SAFETY: `skip <= HUGE` and the map is `len + HUGE` bytes, so the
        // pointer stays inside it.
        let base = unsafe { map.as_mut_ptr().add(skip) };
        Some(Arc::new(Chunk {
            _map: map,
            base,
            len,
        }))
    }
}

/// A zeroed, 64-byte-aligned range of a chunk, owned alone.
pub(crate) struct Region {
    chunk: Arc<Chunk>,
    offset: usize,
    len: usize,
}

impl Region {
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `offset + len <= chunk.len` (checked when cut), no other
        // region overlaps this one, and `&mut self` is needed to write.
        unsafe { std::slice::from_raw_parts(self.chunk.base.add(self.offset), self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes this the only borrow of
        // the range.
        unsafe { std::slice::from_raw_parts_mut(self.chunk.base.add(self.offset), self.len) }
    }
}

/// Cuts regions from chunks, one after another.
pub(crate) struct Arena {
    /// The chunk regions are being cut from and where its free space
    /// starts.
    current: Mutex<Option<(Weak<Chunk>, usize)>>,
}

/// The arena of every packed weight matrix in the process.
pub(crate) static PACKED_WEIGHTS: Arena = Arena::new();

impl Arena {
    pub(crate) const fn new() -> Self {
        Self {
            current: Mutex::new(None),
        }
    }

    /// `len` zeroed bytes after the previous region in the current chunk,
    /// or at the start of a new one; `None` where the OS refuses a map.
    pub(crate) fn region(&self, len: usize) -> Option<Region> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((chunk, start)) = current
            .as_ref()
            .and_then(|(w, at)| Some((w.upgrade()?, *at)))
        {
            if len <= chunk.len - start {
                let end = (start + len).next_multiple_of(ALIGN).min(chunk.len);
                *current = Some((Arc::downgrade(&chunk), end));
                return Some(Region {
                    chunk,
                    offset: start,
                    len,
                });
            }
        }
        if len >= CHUNK {
            // A matrix larger than a chunk gets its own; the current one
            // stays.
            let chunk = Chunk::new(len.checked_next_multiple_of(HUGE)?)?;
            return Some(Region {
                chunk,
                offset: 0,
                len,
            });
        }
        let chunk = Chunk::new(CHUNK)?;
        *current = Some((Arc::downgrade(&chunk), len.next_multiple_of(ALIGN)));
        Some(Region {
            chunk,
            offset: 0,
            len,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_aligned_disjoint_zeroed_and_back_to_back() {
        let arena = Arena::new();
        let mut a = arena.region(100).expect("map");
        let mut b = arena.region(3 << 20).expect("map");
        assert!(a.bytes().iter().all(|&x| x == 0));
        assert!(b.bytes().iter().all(|&x| x == 0));
        a.bytes_mut().fill(1);
        b.bytes_mut().fill(2);
        assert!(a.bytes().iter().all(|&x| x == 1));
        assert!(b.bytes().iter().all(|&x| x == 2));
        let (pa, pb) = (a.bytes().as_ptr() as usize, b.bytes().as_ptr() as usize);
        assert_eq!(pa % ALIGN, 0);
        assert_eq!(pb % ALIGN, 0);
        assert_eq!(pb, pa + 128);
        assert_eq!(pa % HUGE, 0);
    }

    #[test]
    fn a_region_larger_than_a_chunk_gets_its_own_aligned_map() {
        let arena = Arena::new();
        let small = arena.region(64).expect("map");
        let mut big = arena.region(CHUNK + 1).expect("map");
        assert_eq!(big.bytes().len(), CHUNK + 1);
        assert_eq!(big.bytes().as_ptr() as usize % HUGE, 0);
        big.bytes_mut()[CHUNK] = 7;
        assert_eq!(big.bytes()[CHUNK], 7);
        let next = arena.region(64).expect("map");
        assert!(Arc::ptr_eq(&small.chunk, &next.chunk));
        assert_eq!(next.offset, ALIGN);
    }

    #[test]
    fn an_impossible_length_is_refused_not_wrapped() {
        let arena = Arena::new();
        assert!(arena.region(usize::MAX - 1).is_none());
        assert!(arena.region(usize::MAX - HUGE + 1).is_none());
        // The arena still works afterwards.
        assert_eq!(arena.region(64).expect("map").bytes().len(), 64);
    }

    #[test]
    fn a_chunk_is_unmapped_with_its_last_region() {
        let arena = Arena::new();
        let r = arena.region(64).expect("map");
        let weak = Arc::downgrade(&r.chunk);
        let r2 = arena.region(64).expect("map");
        assert!(Arc::ptr_eq(&r.chunk, &r2.chunk));
        drop(r);
        assert!(weak.upgrade().is_some());
        drop(r2);
        assert!(weak.upgrade().is_none());
        // The next region starts a fresh chunk.
        let r3 = arena.region(64).expect("map");
        assert_eq!(r3.offset, 0);
    }
}
