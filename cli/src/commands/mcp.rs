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
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

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
    boot: super::vm_run::VmOptions,
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
    let (mut from_bermd, mut to_bermd) = stream.into_split();
    let upstream = async {
        let mut stdin = tokio::io::stdin();
        let copied = tokio::io::copy(&mut stdin, &mut to_bermd).await;
        let _ = to_bermd.shutdown().await;
        copied
    };
    let downstream = async {
        let mut stdout = tokio::io::stdout();
        let copied = tokio::io::copy(&mut from_bermd, &mut stdout).await;
        let _ = stdout.flush().await;
        // The harness closed its end: nobody is left to answer.
        if let Err(e) = &copied
            && e.kind() == std::io::ErrorKind::BrokenPipe
        {
            crate::out::closed();
        }
        copied
    };
    // The session ends when bermd closes its side (after stdin closes, or
    // when bermd stops).
    tokio::pin!(upstream);
    tokio::pin!(downstream);
    tokio::select! {
        result = &mut downstream => { result.context("copying from bermd")?; }
        result = &mut upstream => {
            result.context("copying to bermd")?;
            // stdin is done; deliver every answer still on its way.
            downstream.await.context("copying from bermd")?;
        }
    }
    Ok(Exit::Ok)
}
