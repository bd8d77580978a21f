//! The guest's two line services: who is connected, and how events reach them.
//!
//! Every event goes to every control connection and is kept in a history that each new
//! control connection receives right after its greeting, so a host that connects late (or
//! reconnects) still sees `boot_start`, `boot_complete` or `boot_failed`. Log lines go to
//! every logs connection, with a bounded backlog for late connections. All writes to one
//! connection happen under one lock, so lines never interleave, and each socket has a send
//! timeout, so a host that stops reading loses its connection instead of blocking PID 1.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berm_vm_protocol::framing::{LineReader, ReadLineError};
use berm_vm_protocol::{
    ErrorReply, Event, Greeting, GuestLine, Log, LogLevel, PROTOCOL_VERSION, Phase, Receipt,
    Request, Service, Status,
};

use crate::lock::lock;
use crate::registry::Registry;
use crate::sys;

/// Connections beyond this many per service are closed at once.
const MAX_CONNECTIONS: usize = 16;
/// Log lines kept for connections that arrive later.
const LOG_BACKLOG: usize = 512;
/// How long a write to one host connection may block.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// What the main sequence is told by connection threads.
pub enum Command {
    /// A host asked for shutdown.
    Shutdown,
}

#[derive(Default)]
struct Peers {
    next_id: u64,
    peers: Vec<(u64, File)>,
}

impl Peers {
    fn add(&mut self, file: File) -> u64 {
        self.next_id += 1;
        self.peers.push((self.next_id, file));
        self.next_id
    }

    /// Writes `line` to every peer, dropping those whose write fails.
    fn broadcast(&mut self, line: &str) {
        self.peers
            .retain_mut(|(_, file)| file.write_all(line.as_bytes()).is_ok());
    }
}

#[derive(Default)]
struct ControlState {
    peers: Peers,
    history: Vec<String>,
}

#[derive(Default)]
struct LogState {
    peers: Peers,
    backlog: VecDeque<String>,
}

/// Shared by the main sequence and every connection thread.
pub struct Hub {
    boot_id: String,
    control: Mutex<ControlState>,
    logs: Mutex<LogState>,
    phase: Mutex<Phase>,
    min_level: Mutex<LogLevel>,
    open_control: AtomicU32,
    /// Receipt relays still reading their app's pipe ([`Hub::relaying`]).
    receipt_relays: AtomicU32,
    commands: Mutex<Sender<Command>>,
    apps: Registry,
}

/// A running receipt relay, counted by [`Hub::relaying`] until dropped.
pub struct RelayGuard(Arc<Hub>);

impl Drop for RelayGuard {
    fn drop(&mut self) {
        self.0.receipt_relays.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The longest free text (a log or error message) berm-init puts in one line. With it every
/// line stays far below the 64 KiB cap, even when a whole event line is mirrored, escaped,
/// into a log line.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;

/// Cuts `text` to at most `max` bytes on a character boundary, marking the cut.
pub fn bounded(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max.saturating_sub(3);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

impl Hub {
    /// A hub for this boot.
    pub fn new(boot_id: String, commands: Sender<Command>) -> Arc<Self> {
        Arc::new(Self {
            boot_id,
            control: Mutex::default(),
            logs: Mutex::default(),
            phase: Mutex::new(Phase::Booting),
            min_level: Mutex::new(LogLevel::Info),
            open_control: AtomicU32::new(0),
            receipt_relays: AtomicU32::new(0),
            commands: Mutex::new(commands),
            apps: Registry::default(),
        })
    }

    fn line(&self, event: Event) -> String {
        GuestLine {
            boot_id: self.boot_id.clone(),
            uptime_ms: sys::uptime_ms(),
            event,
        }
        .to_line()
    }

    /// Every event line sent so far, in order (what a new control connection replays).
    #[cfg(test)]
    pub fn history(&self) -> Vec<String> {
        lock(&self.control).history.clone()
    }

    /// Sets the phase `status` reports.
    pub fn set_phase(&self, phase: Phase) {
        *lock(&self.phase) = phase;
    }

    /// Sends a lifecycle event to every control connection (and later ones), and mirrors it
    /// as a log line and on the console.
    pub fn event(&self, event: Event) {
        let line = self.line(event);
        eprint!("berm-init: {line}");
        let mut control = lock(&self.control);
        control.history.push(line.clone());
        control.peers.broadcast(&line);
        drop(control);
        self.log(LogLevel::Info, line.trim_end().to_owned());
    }

    /// Like [`Hub::event`] but never blocks on a lock another thread holds: for the panic hook.
    pub fn event_from_panic(&self, event: Event) {
        let line = self.line(event);
        eprint!("berm-init: {line}");
        if let Ok(mut control) = self.control.try_lock() {
            control.peers.broadcast(&line);
        }
    }

    /// Sets the least severe level [`Hub::log`] passes on (`BERM_LOG`).
    pub fn set_log_level(&self, level: LogLevel) {
        *lock(&self.min_level) = level;
    }

    /// The apps of this boot.
    pub fn apps(&self) -> &Registry {
        &self.apps
    }

    /// Sends a line to every logs connection and keeps it in the backlog.
    pub fn log(&self, level: LogLevel, message: String) {
        self.log_as("berm-init", level, message);
    }

    /// Counts a receipt relay as running until the returned guard is dropped.
    pub fn relaying(self: &Arc<Self>) -> RelayGuard {
        self.receipt_relays.fetch_add(1, Ordering::SeqCst);
        RelayGuard(Arc::clone(self))
    }

    /// Waits (at most `limit`) for every receipt relay to reach its pipe's end: at shutdown,
    /// once the apps are gone, so their last checkpoints go out before `power_off`.
    pub fn wait_for_receipts(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while self.receipt_relays.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends a line of `app`'s receipt log to every logs connection, and keeps it in the
    /// backlog like a log line.
    pub fn receipt(&self, app: &str, line: String) {
        self.send_log_line(Event::Receipt(Receipt {
            app: app.into(),
            line,
        }));
    }

    /// Like [`Hub::log`], for a line another process wrote (an app's bermd, under its tag).
    pub fn log_as(&self, source: &str, level: LogLevel, message: String) {
        let message = bounded(message, 3 * MAX_MESSAGE_BYTES);
        if level < *lock(&self.min_level) {
            return;
        }
        self.send_log_line(Event::Log(Log {
            level,
            source: source.into(),
            message,
        }));
    }

    /// Sends a logs-port line to every logs connection and keeps it in the bounded backlog.
    fn send_log_line(&self, event: Event) {
        let line = self.line(event);
        let mut logs = lock(&self.logs);
        if logs.backlog.len() == LOG_BACKLOG {
            logs.backlog.pop_front();
        }
        logs.backlog.push_back(line.clone());
        logs.peers.broadcast(&line);
    }

    /// Open control connections.
    pub fn control_connections(&self) -> u32 {
        self.open_control.load(Ordering::SeqCst)
    }

    /// Accepts control connections forever (on its own thread).
    pub fn serve_control(self: Arc<Self>, listener: OwnedFd) {
        loop {
            match sys::accept(&listener) {
                Ok(conn) => {
                    let hub = Arc::clone(&self);
                    std::thread::spawn(move || hub.control_connection(conn));
                }
                Err(e) => {
                    self.log(
                        LogLevel::Error,
                        format!("accept on the control port failed: {e}"),
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    /// Accepts logs connections forever (on its own thread).
    pub fn serve_logs(self: Arc<Self>, listener: OwnedFd) {
        loop {
            match sys::accept(&listener) {
                Ok(conn) => self.logs_connection(conn),
                Err(e) => {
                    self.log(
                        LogLevel::Error,
                        format!("accept on the logs port failed: {e}"),
                    );
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    }

    fn greeting(&self, service: Service) -> String {
        self.line(Event::Greeting(Greeting {
            service,
            protocol: PROTOCOL_VERSION,
            init: concat!("berm-init ", env!("CARGO_PKG_VERSION")).into(),
        }))
    }

    fn logs_connection(&self, mut conn: File) {
        if sys::set_send_timeout(&conn, SEND_TIMEOUT).is_err() {
            return;
        }
        let mut logs = lock(&self.logs);
        if logs.peers.peers.len() >= MAX_CONNECTIONS {
            return;
        }
        let mut ok = conn
            .write_all(self.greeting(Service::Logs).as_bytes())
            .is_ok();
        for line in &logs.backlog {
            ok = ok && conn.write_all(line.as_bytes()).is_ok();
        }
        if ok {
            logs.peers.add(conn);
        }
    }

    fn control_connection(&self, conn: File) {
        if sys::set_send_timeout(&conn, SEND_TIMEOUT).is_err() {
            return;
        }
        let Ok(writer) = conn.try_clone() else { return };
        let id = {
            let mut control = lock(&self.control);
            if control.peers.peers.len() >= MAX_CONNECTIONS {
                return;
            }
            let mut writer = writer;
            let mut ok = writer
                .write_all(self.greeting(Service::Control).as_bytes())
                .is_ok();
            for line in &control.history {
                ok = ok && writer.write_all(line.as_bytes()).is_ok();
            }
            if !ok {
                return;
            }
            control.peers.add(writer)
        };
        self.open_control.fetch_add(1, Ordering::SeqCst);
        let mut reader = LineReader::new(conn);
        loop {
            let reply = match reader.read_line() {
                Ok(None) => break,
                Ok(Some(line)) => match Request::parse(&line) {
                    Ok(Request::Status) => Some(Event::Status(self.status())),
                    Ok(Request::Shutdown) => {
                        // The reply is the shutting_down event every connection receives.
                        let _ = lock(&self.commands).send(Command::Shutdown);
                        None
                    }
                    Err(e) => Some(Event::Error(ErrorReply {
                        message: e.to_string(),
                    })),
                },
                Err(ReadLineError::TooLong) => {
                    self.reply(
                        id,
                        Event::Error(ErrorReply {
                            message: ReadLineError::TooLong.to_string(),
                        }),
                    );
                    break;
                }
                Err(_) => break,
            };
            if let Some(event) = reply {
                self.reply(id, event);
            }
        }
        let mut control = lock(&self.control);
        control.peers.peers.retain(|(peer, _)| *peer != id);
        drop(control);
        self.open_control.fetch_sub(1, Ordering::SeqCst);
    }

    /// Sends a reply to one control connection only.
    fn reply(&self, id: u64, event: Event) {
        let line = self.line(event);
        let mut control = lock(&self.control);
        control
            .peers
            .peers
            .retain_mut(|(peer, file)| *peer != id || file.write_all(line.as_bytes()).is_ok());
    }

    fn status(&self) -> Status {
        let mut children = 0;
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let is_pid = name
                    .to_str()
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()));
                if is_pid
                    && let Ok(stat) = std::fs::read_to_string(entry.path().join("stat"))
                    && stat
                        .rsplit(')')
                        .next()
                        .and_then(|rest| rest.split_whitespace().nth(1))
                        == Some("1")
                {
                    children += 1;
                }
            }
        }
        let mem_available_kib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("MemAvailable:"))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0);
        Status {
            phase: *lock(&self.phase),
            pid: std::process::id(),
            children,
            control_connections: self.control_connections(),
            mem_available_kib,
            apps: self.apps.statuses(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader};
    use std::os::unix::net::UnixStream;
    use std::sync::mpsc::{self, Receiver};

    use berm_vm_protocol::{BootComplete, MAX_LINE_BYTES};

    fn hub() -> (Arc<Hub>, Receiver<Command>) {
        let (tx, rx) = mpsc::channel();
        (Hub::new("0f-a".into(), tx), rx)
    }

    /// A host end of a new connection that `serve` handles on the guest end.
    fn connect(serve: impl FnOnce(File) + Send + 'static) -> BufReader<UnixStream> {
        let (host, guest) = UnixStream::pair().unwrap();
        host.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        std::thread::spawn(move || serve(File::from(OwnedFd::from(guest))));
        BufReader::new(host)
    }

    /// The next line, parsed as the host parses it.
    fn next(conn: &mut BufReader<UnixStream>, service: Service) -> Event {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        GuestLine::parse(service, line.trim_end().as_bytes())
            .unwrap_or_else(|e| panic!("{e}: {line:?}"))
            .event
    }

    fn send(conn: &mut BufReader<UnixStream>, bytes: &[u8]) {
        conn.get_mut().write_all(bytes).unwrap();
    }

    #[test]
    fn control_greets_replays_history_and_answers_requests() {
        let (hub, commands) = hub();
        hub.event(Event::BootComplete(BootComplete { apps: 0 }));
        let guest = Arc::clone(&hub);
        let mut conn = connect(move |file| guest.control_connection(file));
        let Event::Greeting(greeting) = next(&mut conn, Service::Control) else {
            panic!("no greeting first")
        };
        assert_eq!(greeting.service, Service::Control);
        assert_eq!(
            next(&mut conn, Service::Control),
            Event::BootComplete(BootComplete { apps: 0 })
        );
        send(&mut conn, b"{\"op\":\"status\"}\n");
        let Event::Status(status) = next(&mut conn, Service::Control) else {
            panic!("no status reply")
        };
        assert_eq!(status.phase, Phase::Booting);
        assert_eq!(status.control_connections, 1);
        send(&mut conn, b"{\"op\":\"exec\",\"cmd\":\"sh\"}\n");
        let Event::Error(error) = next(&mut conn, Service::Control) else {
            panic!("no error reply")
        };
        assert!(
            error.message.starts_with("request is not"),
            "{}",
            error.message
        );
        send(&mut conn, b"{\"op\":\"shutdown\"}\n");
        let command = commands.recv_timeout(Duration::from_secs(10));
        assert!(matches!(command, Ok(Command::Shutdown)));
    }

    #[test]
    fn an_oversized_request_is_answered_then_the_connection_ends() {
        let (hub, _commands) = hub();
        let guest = Arc::clone(&hub);
        let mut conn = connect(move |file| guest.control_connection(file));
        next(&mut conn, Service::Control);
        send(&mut conn, &vec![b'x'; MAX_LINE_BYTES + 1]);
        let Event::Error(error) = next(&mut conn, Service::Control) else {
            panic!("no error reply")
        };
        assert_eq!(error.message, ReadLineError::TooLong.to_string());
        // Closed with the rest of the request unread: end of file or a reset.
        let mut rest = String::new();
        let end = conn.read_line(&mut rest);
        assert!(matches!(end, Ok(0) | Err(_)), "{end:?} {rest:?}");
        assert_eq!(hub.control_connections(), 0);
    }

    #[test]
    fn logs_below_the_level_are_dropped_and_the_backlog_reaches_late_connections() {
        let (hub, _commands) = hub();
        hub.set_log_level(LogLevel::Warn);
        hub.log(LogLevel::Info, "quiet".into());
        hub.log_as("notes", LogLevel::Error, "loud\u{1b}".into());
        let guest = Arc::clone(&hub);
        let mut conn = connect(move |file| guest.logs_connection(file));
        assert!(matches!(next(&mut conn, Service::Logs), Event::Greeting(_)));
        assert_eq!(
            next(&mut conn, Service::Logs),
            Event::Log(Log {
                level: LogLevel::Error,
                source: "notes".into(),
                message: "loud\u{1b}".into(),
            })
        );
    }

    #[test]
    fn bounded_cuts_on_a_character_boundary() {
        assert_eq!(bounded("short".into(), 10), "short");
        let cut = bounded("é".repeat(10), 9);
        assert!(cut.len() <= 9 && cut.ends_with('…'), "{cut}");
    }
}
