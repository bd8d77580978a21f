//! The raw imports, generated from the one list in `berm_abi`, each behind a
//! safe function that passes a Rust slice as `(ptr, len)`.
//!
//! Every import has the signature `(ptr: i32, len: i32) -> i64`, and the host
//! reads or writes only the `len` bytes at `ptr` during the call (see
//! docs/design/abi.md), so passing a live slice is all the safety needed.

mod raw {
    #[link(wasm_import_module = "berm")]
    unsafe extern "C" {
        pub fn args(ptr: *mut u8, len: usize) -> i64;
        pub fn done(ptr: *const u8, len: usize) -> i64;
        pub fn fail(ptr: *const u8, len: usize) -> i64;
        pub fn reply(ptr: *mut u8, len: usize) -> i64;
        pub fn panic(ptr: *const u8, len: usize) -> i64;
        pub fn call(ptr: *const u8, len: usize) -> i64;
        pub fn content(ptr: *const u8, len: usize) -> i64;
        pub fn progress(ptr: *const u8, len: usize) -> i64;
        pub fn ask(ptr: *const u8, len: usize) -> i64;
        pub fn input(ptr: *mut u8, len: usize) -> i64;
    }

    macro_rules! stubs {
        ($(($module:tt, $name:tt, $ident:ident, $request:tt, $reply:tt)),* $(,)?) => {
            $(
                #[link(wasm_import_module = $module)]
                unsafe extern "C" {
                    #[link_name = $name]
                    pub fn $ident(ptr: *mut u8, len: usize) -> i64;
                }
            )*
        };
    }
    berm_abi::for_each_syscall!(stubs);
}

macro_rules! safe_stubs {
    ($(($module:tt, $name:tt, $ident:ident, $request:tt, $reply:tt)),* $(,)?) => {
        $(
            #[doc = concat!("`", $module, ".", $name, "`: request: ", $request, "; reply: ", $reply, ".")]
            pub fn $ident(region: &mut [u8]) -> i64 {
                // SAFETY: `region` is a live, exclusively borrowed slice; the
                // host touches only its `len` bytes, during this call.
                unsafe { raw::$ident(region.as_mut_ptr(), region.len()) }
            }
        )*
    };
}
berm_abi::for_each_syscall!(safe_stubs);

/// The calling-convention imports the host only writes into: a safe function each that lends
/// it an exclusively borrowed buffer.
macro_rules! writes_into {
    ($($(#[$doc:meta])* $ident:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $ident(buf: &mut [u8]) -> i64 {
                // SAFETY: `buf` is live and exclusively borrowed; the host writes at most
                // `buf.len()` bytes into it.
                unsafe { raw::$ident(buf.as_mut_ptr(), buf.len()) }
            }
        )*
    };
}

/// The calling-convention imports the host only reads: a safe function each that lends it a
/// live slice.
macro_rules! reads_from {
    ($($(#[$doc:meta])* $ident:ident;)*) => {
        $(
            $(#[$doc])*
            pub fn $ident(bytes: &[u8]) -> i64 {
                // SAFETY: the host only reads `bytes.len()` bytes of a live slice.
                unsafe { raw::$ident(bytes.as_ptr(), bytes.len()) }
            }
        )*
    };
}

writes_into! {
    /// `berm.args`: copies the arguments into `buf` if they fit; returns their length.
    args;
    /// `berm.reply`: copies the staged reply into `buf` if it fits.
    reply;
    /// `berm.input`: copies what the call carries from an earlier ask into `buf` if it fits.
    input;
}

reads_from! {
    /// `berm.done`: the result.
    done;
    /// `berm.fail`: the failure message.
    fail;
    /// `berm.panic`: records a panic message.
    panic;
    /// `berm.call`: calls another program; request frames `[program, tool, args]`.
    call;
    /// `berm.content`: adds a content block; request frames `[kind, uri, mime_type, body]`.
    content;
    /// `berm.progress`: reports progress; request frames `[progress, total, message]`.
    progress;
    /// `berm.ask`: ends the call asking the client for input; request frames
    /// `[requests, state]`.
    ask;
}
