//! rein's global allocator: mimalloc, asked the way a C program asks it. The `mimalloc` crate's
//! allocator passes every allocation to `mi_malloc_aligned`, whose fast path takes only blocks of
//! at most 1 KiB: anything larger (a connection's read buffer, a boxed call future, a grown body)
//! falls to mimalloc's generic aligned path, which over-allocates by the alignment and marks the
//! page as holding interior pointers, so freeing from it is slower too. An allocation whose
//! alignment malloc already guarantees (at most 16 bytes here, and no more than its size: the
//! rule the standard library's own `System` allocator uses) goes to `mi_malloc`, `mi_zalloc` and
//! `mi_realloc` instead; only a larger alignment takes the aligned functions.

#![no_std]

use core::alloc::{GlobalAlloc, Layout};
use core::ffi::c_void;

use libmimalloc_sys as ffi;

/// The alignment every `mi_malloc` block of at least this many bytes has: C's `max_align_t`,
/// which mimalloc keeps (its size classes are multiples of two words on 64-bit targets).
const MALLOC_ALIGN: usize = 2 * core::mem::size_of::<usize>();

/// Whether `mi_malloc` of `size` bytes is aligned to `align` without asking.
#[inline]
fn malloc_aligns(size: usize, align: usize) -> bool {
    align <= MALLOC_ALIGN && align <= size
}

/// mimalloc as the global allocator (see the crate's doc).
#[derive(Debug, Clone, Copy, Default)]
pub struct Allocator;

// SAFETY: every pointer returned comes from mimalloc, aligned as the layout asks (the aligned
// functions for alignments malloc does not guarantee) or null when mimalloc is out of memory,
// and mimalloc frees and reallocates any block it handed out, whichever function made it.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if malloc_aligns(layout.size(), layout.align()) {
            // SAFETY: a plain allocation of the layout's size; `malloc_aligns` says its
            // alignment suffices.
            unsafe { ffi::mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: the layout's alignment is a power of two (a `Layout` invariant).
            unsafe { ffi::mi_malloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if malloc_aligns(layout.size(), layout.align()) {
            // SAFETY: as in `alloc`, zeroed.
            unsafe { ffi::mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: as in `alloc`, zeroed.
            unsafe { ffi::mi_zalloc_aligned(layout.size(), layout.align()).cast() }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: the caller gives back a block this allocator made, which mimalloc made.
        unsafe { ffi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let ptr = ptr.cast::<c_void>();
        if malloc_aligns(new_size, layout.align()) {
            // SAFETY: `ptr` is a live mimalloc block; the new block of `new_size` bytes is
            // aligned enough (`malloc_aligns`), and mimalloc copies what fits and frees the old.
            unsafe { ffi::mi_realloc(ptr, new_size).cast() }
        } else {
            // SAFETY: as above, keeping the layout's (power-of-two) alignment.
            unsafe { ffi::mi_realloc_aligned(ptr, new_size, layout.align()).cast() }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    use super::*;

    const SIZES: [usize; 14] =
        [1, 7, 8, 16, 24, 100, 1000, 1024, 1025, 2000, 4096, 8192, 9000, 70_000];
    const ALIGNS: [usize; 7] = [1, 2, 8, 16, 32, 256, 4096];

    /// Every size and alignment gets a block aligned as asked that holds its bytes, zeroed when
    /// asked, and keeps them through growing and shrinking.
    #[test]
    fn blocks_are_aligned_as_asked_and_keep_their_bytes() {
        let a = Allocator;
        for size in SIZES {
            for align in ALIGNS {
                let layout = Layout::from_size_align(size, align).unwrap();
                // Several blocks of each shape: one could be aligned by chance.
                let blocks: Vec<*mut u8> = (0..8)
                    .map(|i| {
                        // SAFETY: a layout of non-zero size.
                        let p = unsafe {
                            if i % 2 == 0 { a.alloc(layout) } else { a.alloc_zeroed(layout) }
                        };
                        assert!(!p.is_null(), "{size} bytes aligned {align}");
                        assert_eq!(p as usize % align, 0, "{size} bytes aligned {align}");
                        // SAFETY: `p` holds `size` bytes.
                        let bytes = unsafe { core::slice::from_raw_parts_mut(p, size) };
                        if i % 2 == 1 {
                            assert!(bytes.iter().all(|&b| b == 0), "zeroed {size}/{align}");
                        }
                        bytes.fill(i as u8 + 1);
                        p
                    })
                    .collect();
                for (i, p) in blocks.into_iter().enumerate() {
                    let mut p = p;
                    let mut layout = layout;
                    for new_size in [size * 3, size.div_ceil(2), size] {
                        let kept = layout.size().min(new_size);
                        // SAFETY: `p` is live with `layout`; `new_size` is not zero.
                        p = unsafe { a.realloc(p, layout, new_size) };
                        assert!(!p.is_null());
                        assert_eq!(p as usize % align, 0, "{size}->{new_size} aligned {align}");
                        // SAFETY: the block holds at least `kept` bytes.
                        let bytes = unsafe { core::slice::from_raw_parts_mut(p, new_size) };
                        assert!(bytes[..kept].iter().all(|&b| b == i as u8 + 1));
                        bytes.fill(i as u8 + 1);
                        layout = Layout::from_size_align(new_size, align).unwrap();
                    }
                    // SAFETY: `p` is live with `layout`.
                    unsafe { a.dealloc(p, layout) };
                }
            }
        }
    }

    /// An allocation of ordinary alignment takes mimalloc's malloc path: its block is the size
    /// class of its size. The aligned path's fallback over-allocates by the alignment and hands
    /// out a pointer into a larger block (what every allocation over 1 KiB got through
    /// `mi_malloc_aligned`).
    #[test]
    fn ordinary_alignments_take_the_malloc_path() {
        let a = Allocator;
        for size in SIZES {
            for align in [1, 8, 16] {
                if align > size {
                    continue;
                }
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: a layout of non-zero size; the block is freed below.
                let p = unsafe { a.alloc(layout) };
                // SAFETY: `p` is a live mimalloc block.
                let usable = unsafe { ffi::mi_usable_size(p.cast()) };
                // SAFETY: a pure function of the size.
                let class = unsafe { ffi::mi_good_size(size) };
                assert_eq!(usable, class, "{size} bytes aligned {align}");
                // SAFETY: `p` is live with `layout`.
                unsafe { a.dealloc(p, layout) };
            }
        }
    }
}
