//! `berm vm install` and `berm vm push` (the lifecycle commands `up`, `ls`, `stop` and `logs`
//! are in [`super::vm_run`]): the pinned kernel and rootfs into the artifact store
//! berm-vmm reads, and from it to an OCI registry.
//!
//! Each artifact is fetched by its sha256 — from an OCI registry (`oci://REGISTRY/REPO`, the
//! default `oci://ghcr.io/berm-os/vm` or `$BERM_VM_MIRROR`: `GET /v2/REPO/blobs/sha256:<pin>`,
//! no manifest read), a URL template, a base URL or a directory — and written through
//! `berm_pins::StoreWriter`: streamed into `<store>/<kind>/<sha256>/<file>.partial` while it
//! is hashed, and renamed into place only once its size and sha256 equal the pins compiled in
//! from the same crate berm-vmm uses, so the two cannot disagree. Anything else — a tampered
//! byte, a short or long download, an HTTP or registry error — deletes the partial file and
//! the directories made for it. From a registry, a connection that breaks off midway is
//! resumed in-process with an HTTP range (berm-oci's `install_blob`); if it keeps breaking,
//! or the process is killed, only the `.partial` file is left, and the next install re-hashes
//! it and asks for the rest. From a URL or directory the next install starts over.
//!
//! `berm vm push REF` sends one architecture's pinned pair from the store, checked against
//! the pins first, as one OCI artifact (berm-oci's `push_vm`; docs/vm.md has its media types
//! and tag).

use std::fs::File;
use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use berm_oci::{BlobProgress, VmFile};
use berm_pins::{
    ArtifactKind, ArtifactStore, DEFAULT_SOURCE, ImagePin, KernelPins, MIRROR_VAR, RootfsPins,
    StoreWriter,
};
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use super::registry::RegistryArgs;
use crate::Exit;

/// `berm vm …`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Fetch the pinned kernel and rootfs, verify them against the pins and install them
    /// where berm-vmm looks ($BERM_VM_ARTIFACTS, else ~/.cache/berm/vm).
    Install(InstallArgs),
    /// Push one architecture's pinned kernel and rootfs from the artifact store to an OCI
    /// registry as one artifact, tagged from the pins (what the release publishes).
    Push(PushArgs),
    /// Start a named VM serving the apps, detached; return once every app is ready and
    /// print each app's socket. It runs until `berm vm stop`.
    Up(super::vm_run::UpArgs),
    /// List the VMs `berm vm up` started: name, status (booting, ready, stopping, stale),
    /// pid, uptime, architecture, hypervisor, apps, state disk.
    Ls(super::vm_run::LsArgs),
    /// Stop a VM: the guest's shutdown op, SIGKILL after a timeout; its sockets are removed.
    Stop(super::vm_run::StopArgs),
    /// Print a VM's guest log (or its console, or berm-vmm's host lines).
    Logs(super::vm_run::LogsArgs),
    /// The idle watchdog of a VM `berm mcp --app` booted (started by it, not by hand).
    #[command(hide = true)]
    Watch(super::vm_app::WatchArgs),
}

/// Arguments of `berm vm install`.
#[derive(clap::Args)]
pub struct InstallArgs {
    /// Where from: `oci://REGISTRY/REPO` (blobs fetched by their pinned digests), a directory
    /// (the store layout `kernel/<sha256>/vmlinux`, or `vmlinux` and `rootfs.erofs` side by
    /// side), a URL template with `{kind}`, `{sha256}` and `{file}`, or a base URL holding the
    /// store layout. Default: $BERM_VM_MIRROR, else oci://ghcr.io/berm-os/vm.
    #[arg(long, value_name = "oci://REPO|DIR|URL")]
    from: Option<String>,
    /// Which guest's artifacts: this host's architecture by default; repeat for several
    /// (`--arch x86_64 --arch aarch64`). An x86_64 host boots an aarch64 guest under QEMU's
    /// emulation.
    #[arg(long, value_name = "ARCH", value_parser = berm_pins::ARCHES)]
    arch: Vec<String>,
    /// Every architecture berm pins (x86_64 and aarch64).
    #[arg(long, conflicts_with = "arch")]
    all_arches: bool,
    /// One JSON object per line on stdout: one per artifact, then a summary (or an error).
    #[arg(long)]
    json: bool,
    /// Registry access (for `oci://` sources).
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Arguments of `berm vm push`.
#[derive(clap::Args)]
pub struct PushArgs {
    /// The repository, without tag: e.g. `ghcr.io/berm-os/vm` or `127.0.0.1:5000/berm/vm`.
    /// The tag is `<arch>-<kernel sha256, 12 hex>-<rootfs sha256, 12 hex>`.
    #[arg(value_name = "REF")]
    reference: String,
    /// Which architecture's pinned pair.
    #[arg(long, value_name = "ARCH", default_value = berm_pins::HOST_ARCH, value_parser = berm_pins::ARCHES)]
    arch: String,
    /// Print what was pushed as one JSON object.
    #[arg(long)]
    json: bool,
    /// Registry access.
    #[command(flatten)]
    registry: RegistryArgs,
}

/// Runs `berm vm …`.
pub async fn run(command: Command) -> anyhow::Result<Exit> {
    match command {
        Command::Install(args) => install(args).await,
        Command::Push(args) => push(args).await,
        Command::Up(args) => {
            super::dist::pull_folders(&args.apps).await?;
            super::vm_run::up(args)
        }
        Command::Ls(args) => super::vm_run::ls(args),
        Command::Stop(args) => super::vm_run::stop(args),
        Command::Logs(args) => super::vm_run::logs(args),
        Command::Watch(args) => super::vm_app::watch(args),
    }
}

/// Where an install reads from.
enum Source {
    Dir(PathBuf),
    Url(String),
    /// `host[:port]/repo`.
    Oci(String),
}

impl Source {
    /// `--from`, else `$BERM_VM_MIRROR`, else [`DEFAULT_SOURCE`]; also the text chosen.
    fn choose(from: Option<&str>) -> (Self, String) {
        let mirror = std::env::var(MIRROR_VAR).ok().filter(|m| !m.is_empty());
        let text = from
            .map(str::to_owned)
            .or(mirror)
            .unwrap_or_else(|| DEFAULT_SOURCE.to_owned());
        (Self::parse(&text), text)
    }

    fn parse(from: &str) -> Self {
        if let Some(repository) = from.strip_prefix("oci://") {
            Source::Oci(repository.trim_end_matches('/').to_owned())
        } else if from.starts_with("http://") || from.starts_with("https://") {
            if from.contains('{') {
                Source::Url(from.to_owned())
            } else {
                Source::Url(format!(
                    "{}/{{kind}}/{{sha256}}/{{file}}",
                    from.trim_end_matches('/')
                ))
            }
        } else {
            Source::Dir(PathBuf::from(from))
        }
    }
}

/// The pinned pair of `arch`: (kind, pin, file name in the store).
fn pins_for(arch: &str) -> anyhow::Result<[(ArtifactKind, ImagePin, &'static str); 2]> {
    let kernel = KernelPins::compiled_in_for(arch)
        .context("the kernel pins compiled into berm are broken")?;
    let rootfs = RootfsPins::compiled_in_for(arch)
        .context("the rootfs pins compiled into berm are broken")?;
    Ok([
        (ArtifactKind::Kernel, kernel.image, kernel.file),
        (
            ArtifactKind::Rootfs,
            rootfs.image,
            ArtifactKind::Rootfs.file(),
        ),
    ])
}

fn store_from_env() -> anyhow::Result<ArtifactStore> {
    ArtifactStore::from_env().context(
        "no artifact store: set BERM_VM_ARTIFACTS, XDG_CACHE_HOME or HOME to say where berm-vmm's artifacts go",
    )
}

async fn install(args: InstallArgs) -> anyhow::Result<Exit> {
    let arches: Vec<String> = if args.all_arches {
        berm_pins::ARCHES.iter().map(|a| a.to_string()).collect()
    } else if args.arch.is_empty() {
        vec![berm_pins::HOST_ARCH.to_owned()]
    } else {
        let mut arches = args.arch.clone();
        arches.dedup();
        arches
    };
    let (source, source_text) = Source::choose(args.from.as_deref());
    let progress = Progress::new(args.json);
    let options = args.registry.options();
    let store = match store_from_env() {
        Ok(store) => store,
        Err(e) => return progress.fail(e, None),
    };
    let started = Instant::now();
    let (mut installed, mut present) = (0, 0);
    for arch in &arches {
        let pins = match pins_for(arch) {
            Ok(pins) => pins,
            Err(e) => return progress.fail(e, None),
        };
        for (kind, pin, file) in &pins {
            let dest = kind.path_named(&store, &pin.sha256, file);
            let report = Report {
                kind: *kind,
                arch,
                pin,
                source: &source_text,
            };
            match already_installed(&dest, pin) {
                Ok(true) => {
                    present += 1;
                    progress.done(&report, &dest, "present", 0.0, 0);
                    continue;
                }
                Ok(false) => {}
                Err(e) => return progress.fail(e, Some(&report)),
            }
            let one = Instant::now();
            let what = format!("{arch} {}", kind.name());
            let fetched = match &source {
                Source::Dir(dir) => {
                    copy_from_dir(dir, *kind, pin, file, &what, &dest, &progress).map(|()| 0)
                }
                Source::Url(template) => {
                    let url = kind.url_named(template, &pin.sha256, file);
                    download(&url, *kind, &what, pin, &dest, &progress)
                        .await
                        .map(|()| 0)
                }
                Source::Oci(repository) => {
                    let mut bar = None;
                    let fetched =
                        berm_oci::install_blob(repository, &what, pin, &dest, &options, &mut |p| {
                            match p {
                                BlobProgress::Started { url, offset } => {
                                    if let Some(old) = bar.take() {
                                        ProgressBar::finish_and_clear(&old);
                                    }
                                    bar = progress.bar(*kind, pin.size, &url, offset);
                                }
                                BlobProgress::Written(n) => {
                                    if let Some(bar) = &bar {
                                        bar.set_position(n);
                                    }
                                }
                            }
                        })
                        .await;
                    match bar.take() {
                        Some(bar) if fetched.is_ok() => bar.finish_and_clear(),
                        Some(bar) => bar.abandon(),
                        None => {}
                    }
                    fetched.map(|f| f.resumed_from).map_err(anyhow::Error::from)
                }
            };
            match fetched {
                Ok(resumed_from) => {
                    installed += 1;
                    let seconds = one.elapsed().as_secs_f64();
                    progress.done(&report, &dest, "installed", seconds, resumed_from);
                }
                Err(e) => {
                    let e = e.context(format!("installing the {} failed", kind.name()));
                    return progress.fail(e, Some(&report));
                }
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        crate::outln!(
            "{}",
            serde_json::json!({
                "summary": true,
                "arches": arches,
                "store": store.root(),
                "source": source_text,
                "installed": installed,
                "present": present,
                "seconds": seconds,
            })
        );
    } else {
        let boot = arches
            .iter()
            .map(|arch| {
                if arch == berm_pins::HOST_ARCH {
                    "berm-vmm run".to_owned()
                } else {
                    format!("berm-vmm run --arch {arch}")
                }
            })
            .collect::<Vec<_>>()
            .join(" and ");
        progress.line(&format!(
            "the pinned {} kernel and rootfs are installed in {} ({} ms); {boot} can boot them",
            arches.join(" and "),
            store.root().display(),
            (seconds * 1000.0) as u64,
        ));
    }
    Ok(Exit::Ok)
}

/// Which artifact a progress line or JSON object is about.
struct Report<'a> {
    kind: ArtifactKind,
    arch: &'a str,
    pin: &'a ImagePin,
    source: &'a str,
}

async fn push(args: PushArgs) -> anyhow::Result<Exit> {
    let store = store_from_env()?;
    let mut files = Vec::new();
    for (kind, pin, file) in pins_for(&args.arch)? {
        let path = kind.path_named(&store, &pin.sha256, file);
        let what = format!("{} {}", args.arch, kind.name());
        let bytes = read_pinned(&path, &pin, &what)?;
        files.push(VmFile {
            file: file.to_owned(),
            bytes,
        });
    }
    let rootfs = files.pop().context("two files")?;
    let kernel = files.pop().context("two files")?;
    let pushed = berm_oci::push_vm(
        &args.reference,
        &args.arch,
        kernel,
        rootfs,
        &args.registry.options(),
    )
    .await?;
    if args.json {
        super::print_json(&pushed)?;
    } else {
        crate::outln!("pushed   {}", pushed.reference);
        crate::outln!("pinned   {}", pushed.pinned);
        for (kind, layer) in [
            ("kernel", &pushed.config.kernel),
            ("rootfs", &pushed.config.rootfs),
        ] {
            crate::outln!(
                "{kind}   sha256:{} ({} bytes, {})",
                layer.sha256,
                layer.size,
                layer.file
            );
        }
    }
    Ok(Exit::Ok)
}

/// The file at `path`, refused unless it has the pinned size and sha256: a push must never
/// publish bytes under a tag that claims the pins.
fn read_pinned(path: &Path, pin: &ImagePin, what: &str) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| {
        format!(
            "the {what} is not in the artifact store at {}: build it (scripts/build-kernel.sh, scripts/build-rootfs.sh) or berm vm install it first",
            path.display()
        )
    })?;
    if bytes.len() as u64 != pin.size {
        bail!(
            "the {what} at {} is {} bytes, but berm is pinned to {}: not pushed",
            path.display(),
            bytes.len(),
            pin.size
        );
    }
    let actual = hex::encode(Sha256::digest(&bytes));
    if actual != pin.sha256.as_str() {
        bail!(
            "the {what} at {} has sha256 {actual}, but berm is pinned to {}: not pushed",
            path.display(),
            pin.sha256
        );
    }
    Ok(bytes)
}

/// True when `dest` already holds exactly the pinned bytes.
fn already_installed(dest: &Path, pin: &ImagePin) -> anyhow::Result<bool> {
    let Ok(meta) = std::fs::metadata(dest) else {
        return Ok(false);
    };
    if meta.len() != pin.size {
        return Ok(false);
    }
    let mut file = File::open(dest).with_context(|| format!("reading {}", dest.display()))?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).with_context(|| format!("reading {}", dest.display()))?;
    Ok(hex::encode(hasher.finalize()) == pin.sha256.as_str())
}

/// Progress: a bar on a terminal, plain lines otherwise (logs, CI, pipes), JSON lines on
/// stdout with `--json`.
struct Progress {
    terminal: bool,
    json: bool,
}

impl Progress {
    fn new(json: bool) -> Self {
        Self {
            terminal: !json && std::io::stderr().is_terminal(),
            json,
        }
    }

    fn line(&self, text: &str) {
        if !self.json {
            eprintln!("berm vm install: {text}");
        }
    }

    /// One artifact done: `status` is `installed` or `present` (already there, not fetched).
    fn done(&self, r: &Report<'_>, dest: &Path, status: &str, seconds: f64, resumed_from: u64) {
        if self.json {
            crate::outln!(
                "{}",
                serde_json::json!({
                    "kind": r.kind.name(),
                    "arch": r.arch,
                    "sha256": r.pin.sha256.as_str(),
                    "size": r.pin.size,
                    "source": r.source,
                    "status": status,
                    "path": dest,
                    "resumed_from": resumed_from,
                    "seconds": seconds,
                })
            );
        } else if status == "present" {
            self.line(&format!(
                "{} {} is already installed at {}",
                r.kind.name(),
                r.pin.sha256,
                dest.display()
            ));
        } else {
            self.line(&format!(
                "{} {} verified and installed at {} ({} bytes{}, {} ms)",
                r.kind.name(),
                r.pin.sha256,
                dest.display(),
                r.pin.size,
                if resumed_from > 0 {
                    format!(", {resumed_from} of them kept from an interrupted install")
                } else {
                    String::new()
                },
                (seconds * 1000.0) as u64
            ));
        }
    }

    /// An install refused: with `--json`, one JSON object on stdout (and the message on
    /// stderr too); otherwise the error goes to `main`, which prints it.
    fn fail(&self, error: anyhow::Error, r: Option<&Report<'_>>) -> anyhow::Result<Exit> {
        if !self.json {
            return Err(error);
        }
        let message = format!("{error:#}");
        let mut object = serde_json::json!({ "error": message });
        if let Some(r) = r {
            object["kind"] = r.kind.name().into();
            object["arch"] = r.arch.into();
            object["sha256"] = r.pin.sha256.as_str().into();
            object["source"] = r.source.into();
        }
        crate::outln!("{object}");
        eprintln!("berm: {message}");
        Ok(Exit::Error)
    }

    fn bar(&self, kind: ArtifactKind, size: u64, from: &str, offset: u64) -> Option<ProgressBar> {
        if !self.terminal {
            let resume = if offset > 0 {
                format!(", resuming after {offset} bytes")
            } else {
                String::new()
            };
            self.line(&format!(
                "{} ({size} bytes) from {from}{resume}",
                kind.name()
            ));
            return None;
        }
        let bar = ProgressBar::new(size);
        let style = ProgressStyle::with_template(
            "{prefix:>7} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        )
        .map(|s| s.progress_chars("=> "))
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(kind.name());
        bar.set_position(offset);
        Some(bar)
    }
}

/// A [`StoreWriter`] with a progress bar beside it, for the directory and URL sources.
struct Sink<'a> {
    writer: Option<StoreWriter>,
    kind: ArtifactKind,
    pin: &'a ImagePin,
    progress: &'a Progress,
    bar: Option<ProgressBar>,
}

impl<'a> Sink<'a> {
    fn create(
        kind: ArtifactKind,
        what: &str,
        pin: &'a ImagePin,
        dest: &Path,
        progress: &'a Progress,
    ) -> anyhow::Result<Self> {
        // Started over: only registries resume (docs/vm.md).
        Ok(Self {
            writer: Some(StoreWriter::create(what, pin, dest)?),
            kind,
            pin,
            progress,
            bar: None,
        })
    }

    fn start(&mut self, from: &str) {
        self.bar = self.progress.bar(self.kind, self.pin.size, from, 0);
    }

    fn push(&mut self, chunk: &[u8]) -> anyhow::Result<()> {
        let writer = self.writer.as_mut().context("the partial file is closed")?;
        writer.write(chunk)?;
        if let Some(bar) = &self.bar {
            bar.set_position(writer.written());
        }
        Ok(())
    }

    /// Checks size and digest, then makes the file durable and renames it into place; on
    /// error the writer deletes the partial file.
    fn finish(mut self) -> anyhow::Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        self.writer
            .take()
            .context("the partial file is closed")?
            .commit()?;
        Ok(())
    }
}

impl Drop for Sink<'_> {
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.abandon();
        }
    }
}

fn copy_from_dir(
    dir: &Path,
    kind: ArtifactKind,
    pin: &ImagePin,
    file: &str,
    what: &str,
    dest: &Path,
    progress: &Progress,
) -> anyhow::Result<()> {
    let in_store = kind.path_named(&ArtifactStore::at(dir), &pin.sha256, file);
    let side_by_side = dir.join(file);
    let path = if in_store.exists() {
        in_store
    } else if side_by_side.exists() {
        side_by_side
    } else {
        bail!(
            "{} holds neither {} nor {}",
            dir.display(),
            in_store.display(),
            side_by_side.display()
        );
    };
    let mut file = File::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let mut sink = Sink::create(kind, what, pin, dest, progress)?;
    sink.start(&path.display().to_string());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return sink.finish();
        }
        sink.push(&buf[..n])?;
    }
}

async fn download(
    url: &str,
    kind: ArtifactKind,
    what: &str,
    pin: &ImagePin,
    dest: &Path,
    progress: &Progress,
) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(30))
        .read_timeout(std::time::Duration::from_secs(60))
        .build()
        .context("building the HTTP client")?;
    let response = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("requesting {url}"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("{url} answered {status}");
    }
    if let Some(length) = response.content_length()
        && length != pin.size
    {
        bail!(
            "{url} announces {length} bytes, but the pinned {} has {}: refused",
            kind.name(),
            pin.size
        );
    }
    let mut sink = Sink::create(kind, what, pin, dest, progress)?;
    sink.start(url);
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.with_context(|| format!("downloading {url}"))?;
        sink.push(&chunk)?;
    }
    sink.finish()
}
