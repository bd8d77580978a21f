//! Writing to stdout without a panic when the reader has gone.
//!
//! `println!` panics (with a backtrace hint) when stdout is a pipe whose reader closed it,
//! e.g. `berm ls --json | head -1` over a long listing. berm's output goes through
//! [`outln!`](crate::outln) and [`out!`](crate::out) instead: a closed stdout ends berm the
//! way it ends `ls` or `git` — killed by SIGPIPE, with nothing printed — and any other write
//! error is one line on stderr and exit 2.

use std::io::Write;

/// Writes `args` to stdout (see the module documentation).
pub fn write(args: std::fmt::Arguments<'_>) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args) {
        failed(&e);
    }
}

/// Writes `bytes` to stdout and flushes it (see the module documentation).
pub fn write_bytes(bytes: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        failed(&e);
    }
}

/// Ends berm after a failed write to stdout: quietly by SIGPIPE when the reader has gone,
/// else with the error on stderr and exit 2.
pub fn failed(error: &std::io::Error) -> ! {
    if error.kind() == std::io::ErrorKind::BrokenPipe {
        closed();
    }
    let _ = writeln!(std::io::stderr(), "berm: writing to stdout failed: {error}");
    std::process::exit(i32::from(crate::Exit::Error.code()));
}

/// Dies by SIGPIPE, as a program that never ignored it would have on its write; a shell
/// reports that as 141, the same as for `ls` or `git`.
pub fn closed() -> ! {
    crate::sys::die_of_sigpipe()
}

/// `println!` for berm's output: a closed stdout ends berm quietly ([`crate::out`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for berm's output: a closed stdout ends berm quietly ([`crate::out`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}
