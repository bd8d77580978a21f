//! The allocator programs get by default: a bump arena for the first
//! allocations of a call, then the system allocator.
//!
//! Nothing survives a call, so most calls allocate a few kilobytes and end.
//! Rust's wasm allocator takes its first chunk with `memory.grow`, and a grow
//! costs the host two `mprotect`s per call (grow, then shrink back when the
//! instance is recycled) with TLB shootdowns: most of a small call's cost.
//! Serving the first allocations from a zeroed static arena inside the
//! initial memory avoids growing at all. Frees of the most recent allocation
//! are reclaimed; anything that does not fit goes to `System`. Opt out with
//! `default-features = false` to install your own `#[global_allocator]`.

use core::alloc::{GlobalAlloc, Layout};
use core::cell::UnsafeCell;
use std::alloc::System;

const ARENA_BYTES: usize = 128 << 10;

#[repr(C, align(16))]
struct Arena {
    bytes: UnsafeCell<[u8; ARENA_BYTES]>,
    /// Offset of the first free byte.
    next: UnsafeCell<usize>,
}

// SAFETY: a wasm32-unknown-unknown program has one thread, and berm runs each
// instance on one thread at a time; nothing can observe the cells concurrently.
unsafe impl Sync for Arena {}

static ARENA: Arena = Arena {
    bytes: UnsafeCell::new([0; ARENA_BYTES]),
    next: UnsafeCell::new(0),
};

/// The bump-then-system allocator described in the module docs.
pub struct CallAllocator;

impl CallAllocator {
    fn base() -> usize {
        ARENA.bytes.get() as usize
    }

    fn contains(ptr: *mut u8) -> bool {
        let at = ptr as usize;
        at >= Self::base() && at < Self::base() + ARENA_BYTES
    }

    /// Bumps `next` for `layout`; `None` when the arena is full.
    fn bump(layout: Layout) -> Option<*mut u8> {
        // SAFETY: single-threaded (see `impl Sync`), and no reference to
        // `next` outlives this function.
        let next = unsafe { &mut *ARENA.next.get() };
        let start = (Self::base() + *next).checked_next_multiple_of(layout.align())?;
        let end = start.checked_add(layout.size())?;
        if end > Self::base() + ARENA_BYTES {
            return None;
        }
        *next = end - Self::base();
        Some(start as *mut u8)
    }
}

// SAFETY: every pointer handed out is either a fresh, aligned, in-bounds
// range of the arena that no other live allocation overlaps (bump only moves
// forward, and moves back only over the allocation being freed), or comes
// from `System`, to which its free and realloc are forwarded.
unsafe impl GlobalAlloc for CallAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match Self::bump(layout) {
            Some(ptr) => ptr,
            // SAFETY: forwarded with the caller's guarantees on `layout`.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if Self::contains(ptr) {
            // SAFETY: single-threaded; see `impl Sync`.
            let next = unsafe { &mut *ARENA.next.get() };
            if ptr as usize + layout.size() == Self::base() + *next {
                *next = ptr as usize - Self::base();
            }
        } else {
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !Self::contains(ptr) {
            // SAFETY: `ptr` came from `System` with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: single-threaded; see `impl Sync`.
        let next = unsafe { &mut *ARENA.next.get() };
        let is_last = ptr as usize + layout.size() == Self::base() + *next;
        let end = ptr as usize + new_size;
        if is_last && end <= Self::base() + ARENA_BYTES {
            *next = end - Self::base();
            return ptr;
        }
        if new_size <= layout.size() {
            return ptr;
        }
        // SAFETY: `layout.align()` is a valid alignment and `new_size` is
        // non-zero and does not overflow when rounded (the caller's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as for `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both ranges are live, distinct allocations at least
            // `layout.size()` long.
            unsafe { core::ptr::copy_nonoverlapping(ptr, new, layout.size()) };
            // SAFETY: `ptr` is a live arena allocation with `layout`.
            unsafe { self.dealloc(ptr, layout) };
        }
        new
    }
}
