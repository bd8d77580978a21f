//! `berm mcp`: the stdio bridge an agent harness launches.
//!
//! It copies bytes between stdin/stdout and `$BERM_HOME/mcp.sock` (or, with
//! `--socket`, any bermd MCP socket, such as a VM app's `rpc-<i>.sock`, or with
//! `--vm NAME` that of a VM `berm vm up` started); bermd speaks MCP on the other
//! end. Plain `berm mcp` does not start bermd: a harness that launched one per
//! session would hold programs nobody deployed to, so when bermd is not running it
//! says how to start it and exits 2. `berm mcp --app DIR` is the one form that
//! starts something: the app folder's own VM ([`super::vm_app`]).

use std::path::{Path, PathBuf};

use anyhow::Context;
use berm_control::ClientError;
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::mcp_lines::{LineReader, Pending};

use crate::Exit;

/// `berm mcp` arguments.
#[derive(clap::Args)]
pub struct Args {
    /// Bridge to this MCP socket instead of the local bermd's, e.g. a VM
    /// app's `<run-dir>/rpc-0.sock` (once the app is ready).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["vm", "app"])]
    socket: Option<PathBuf>,
    /// Bridge to an app of the VM `berm vm up` started under this name (it must be
    /// running; nothing is started).
    #[arg(long, value_name = "NAME")]
    vm: Option<String>,
    /// Without --vm: an app folder; bridge to it in its own VM (named as `berm vm up` names
    /// it), booting one if none runs and rebooting it when the folder changed. With --vm:
    /// which app, by name or index (needed when the VM serves several).
    #[arg(long, value_name = "DIR|NAME|INDEX")]
    app: Option<String>,
    /// With --app DIR: seconds a VM this booted stays up after its last client left.
    #[arg(long, value_name = "SECONDS", default_value_t = 600)]
    idle_timeout: u64,
    /// With --app DIR: how to boot the VM.
    #[command(flatten)]
    boot: berm_vm_launch::launch::VmOptions,
}

/// Bridges until either side closes.
pub async fn run(home: &Path, args: Args) -> anyhow::Result<Exit> {
    if args.vm.is_none()
        && let Some(dir) = &args.app
    {
        return super::vm_app::run(Path::new(dir), args.idle_timeout, &args.boot).await;
    }
    let named = match &args.vm {
        Some(vm) => Some(super::vm_run::socket_of(vm, args.app.as_deref())?),
        None => args.socket.clone(),
    };
    let path = named
        .clone()
        .unwrap_or_else(|| home.join(berm_control::home::MCP_SOCKET));
    let stream = match UnixStream::connect(&path).await {
        Ok(stream) => stream,
        Err(e) if named.is_some() => {
            return Err(e).with_context(|| {
                format!(
                    "connecting to {} (is the VM running and the app ready?)",
                    path.display()
                )
            });
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            // Same message as every other command.
            let control = home.join(berm_control::home::CONTROL_SOCKET);
            return Err(ClientError::NotRunning { path: control }.into());
        }
        Err(e) => return Err(e).with_context(|| format!("connecting to {}", path.display())),
    };
    let (from_bermd, mut to_bermd) = stream.into_split();
    let mut from_bermd = LineReader::new(BufReader::new(from_bermd), "the server");
    let mut stdin = LineReader::new(BufReader::new(tokio::io::stdin()), "the client");
    let mut stdout = tokio::io::stdout();
    let mut pending = Pending::default();
    let mut stdin_open = true;
    // A VM's bermd (a named socket) never sees the end of stdin, so its session ends once
    // every request has its answer; the local bermd sees it and closes ([`mcp_lines`]).
    let relayed = named.is_some();
    loop {
        if !stdin_open && relayed && pending.is_empty() {
            break;
        }
        tokio::select! {
            line = stdin.next_line(), if stdin_open => match line? {
                Some(mut line) => {
                    if !line.ends_with(b"\n") {
                        // A last line without its newline still ends a frame.
                        line.push(b'\n');
                    }
                    pending.client(&line);
                    to_bermd.write_all(&line).await.context("copying to bermd")?;
                }
                None => {
                    stdin_open = false;
                    // Never to a VM: libkrun resets a connection whose host side
                    // half-closes, losing the answers still on their way.
                    if !relayed {
                        let _ = to_bermd.shutdown().await;
                    }
                }
            },
            line = from_bermd.next_line() => match line? {
                Some(line) => {
                    pending.server(&line);
                    if let Err(e) = write_all_flush(&mut stdout, &line).await {
                        if e.kind() == std::io::ErrorKind::BrokenPipe {
                            // The harness closed its end: nobody is left to answer.
                            crate::out::closed();
                        }
                        return Err(e).context("copying from bermd");
                    }
                }
                None => break,
            },
        }
    }
    Ok(Exit::Ok)
}

async fn write_all_flush(to: &mut tokio::io::Stdout, line: &[u8]) -> std::io::Result<()> {
    to.write_all(line).await?;
    to.flush().await
}
