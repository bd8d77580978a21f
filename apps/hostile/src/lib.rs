//! hostile: a program that misbehaves on purpose, for berm's tests.

/// Misbehaves on purpose: loops, exhausts memory and stack, floods output,
/// panics, reaches for syscalls it may not have. Used by the tests to show
/// that every bound holds and the host survives.
///
/// # Usage
/// Never deploy this where a model can reach it, except to test bounds.
#[berm_guest::program]
mod hostile {
    use std::hint::black_box;

    static mut COUNTER: u64 = 0;

    /// Increment a global counter and return it. A fresh instance per call
    /// means it always says 1.
    pub fn counter() -> u64 {
        // SAFETY: a wasm32 program is single-threaded, and this is the only
        // access to COUNTER.
        unsafe {
            COUNTER += 1;
            COUNTER
        }
    }

    /// Loop forever.
    pub fn spin() -> u64 {
        let mut n: u64 = 0;
        loop {
            n = black_box(n.wrapping_add(1));
        }
    }

    /// Allocate until memory runs out.
    pub fn memory_bomb() -> usize {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut block = vec![0u8; 1 << 20];
            block[0] = 1;
            hoard.push(black_box(block));
            black_box(hoard.len());
        }
    }

    fn descend(n: u64) -> u64 {
        if black_box(n) == u64::MAX {
            return 0;
        }
        1 + descend(black_box(n + 1))
    }

    /// Recurse without end.
    pub fn recurse() -> u64 {
        descend(0)
    }

    /// Return `bytes` bytes of output.
    ///
    /// # Arguments
    /// - `bytes`: how much to return
    pub fn flood(bytes: u64) -> String {
        "x".repeat(bytes as usize)
    }

    /// Panic with a message.
    ///
    /// # Arguments
    /// - `message`: the panic message
    pub fn panic(message: String) -> String {
        panic!("{message}")
    }

    /// Read a file through the `fs` syscall, which a bare runtime does not
    /// serve.
    ///
    /// # Arguments
    /// - `path`: the file
    pub fn read_file(path: String) -> Result<String, berm_guest::Error> {
        let bytes = berm_guest::fs::read(&path)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
