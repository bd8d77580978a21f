//! `berm vm install`: the pinned kernel and rootfs into the artifact store berm-vmm reads.
//!
//! Each artifact is fetched by its sha256 (from a URL template, a base URL or a directory),
//! streamed into `<store>/<kind>/<sha256>/<file>.partial` while it is hashed, and renamed into
//! place only once its size and sha256 equal the pins compiled in from the same crate berm-vmm
//! uses (`berm-pins`), so the two cannot disagree. Anything else — a tampered byte, a short or
//! long download, an HTTP error — deletes the partial file: nothing half-written is left, and
//! berm-vmm never sees a name it would read. A download interrupted by a crash leaves only the
//! `.partial` file, which the next install truncates and writes from the start.

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use berm_pins::{
    ArtifactKind, ArtifactStore, DEFAULT_URL_TEMPLATE, ImagePin, KernelPins, RootfsPins,
};
use futures_util::StreamExt;
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};

use crate::Exit;

/// `berm vm …`.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Fetch the pinned kernel and rootfs, verify them against the pins and install them
    /// where berm-vmm looks ($BERM_VM_ARTIFACTS, else ~/.cache/berm/vm).
    Install(InstallArgs),
}

/// Arguments of `berm vm install`.
#[derive(clap::Args)]
pub struct InstallArgs {
    /// Where from: a directory (the store layout `kernel/<sha256>/vmlinux`, or `vmlinux` and
    /// `rootfs.erofs` side by side), a URL template with `{kind}`, `{sha256}` and `{file}`,
    /// or a base URL holding the store layout. Default: the public release,
    /// https://github.com/berm-os/berm/releases/download/vm-artifacts/{kind}-{sha256}-{file}
    #[arg(long, value_name = "DIR|URL")]
    from: Option<String>,
    /// Which guest's artifacts: this host's architecture by default, or `aarch64` /
    /// `x86_64` (an x86_64 host boots an aarch64 guest under QEMU's emulation).
    #[arg(long, value_name = "ARCH", default_value = berm_pins::HOST_ARCH, value_parser = berm_pins::ARCHES)]
    arch: String,
}

/// Runs `berm vm …`.
pub async fn run(command: Command) -> anyhow::Result<Exit> {
    match command {
        Command::Install(args) => install(args).await,
    }
}

/// Where an install reads from.
enum Source {
    Dir(PathBuf),
    Url(String),
}

impl Source {
    fn parse(from: Option<&str>) -> Self {
        match from {
            None => Source::Url(DEFAULT_URL_TEMPLATE.to_owned()),
            Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
                if url.contains('{') {
                    Source::Url(url.to_owned())
                } else {
                    Source::Url(format!(
                        "{}/{{kind}}/{{sha256}}/{{file}}",
                        url.trim_end_matches('/')
                    ))
                }
            }
            Some(dir) => Source::Dir(PathBuf::from(dir)),
        }
    }
}

async fn install(args: InstallArgs) -> anyhow::Result<Exit> {
    let store = ArtifactStore::from_env().context(
        "no artifact store: set BERM_VM_ARTIFACTS, XDG_CACHE_HOME or HOME to say where berm-vmm's artifacts go",
    )?;
    let kernel = KernelPins::compiled_in_for(&args.arch)
        .context("the kernel pins compiled into berm are broken")?;
    let pins = [
        (ArtifactKind::Kernel, kernel.image, kernel.file),
        (
            ArtifactKind::Rootfs,
            RootfsPins::compiled_in_for(&args.arch)
                .context("the rootfs pins compiled into berm are broken")?
                .image,
            ArtifactKind::Rootfs.file(),
        ),
    ];
    let source = Source::parse(args.from.as_deref());
    let progress = Progress::new();
    let started = Instant::now();
    for (kind, pin, file) in &pins {
        let dest = kind.path_named(&store, &pin.sha256, file);
        if already_installed(&dest, pin)? {
            progress.line(&format!(
                "{} {} is already installed at {}",
                kind.name(),
                pin.sha256,
                dest.display()
            ));
            continue;
        }
        let one = Instant::now();
        let mut sink = Sink::create(*kind, pin, &dest, &progress)?;
        let fetched = match &source {
            Source::Dir(dir) => copy_from_dir(dir, *kind, pin, file, &mut sink),
            Source::Url(template) => {
                download(&kind.url_named(template, &pin.sha256, file), &mut sink).await
            }
        };
        // Whatever went wrong, the partial file goes: nothing half-written stays behind.
        let installed = fetched.and_then(|()| sink.finish());
        if let Err(e) = installed {
            sink.abort();
            return Err(e.context(format!("installing the {} failed", kind.name())));
        }
        progress.line(&format!(
            "{} {} verified and installed at {} ({} bytes, {} ms)",
            kind.name(),
            pin.sha256,
            dest.display(),
            pin.size,
            one.elapsed().as_millis()
        ));
    }
    progress.line(&format!(
        "the pinned {} kernel and rootfs are installed in {} ({} ms); berm-vmm run{} can boot them",
        args.arch,
        store.root().display(),
        started.elapsed().as_millis(),
        if args.arch == berm_pins::HOST_ARCH {
            String::new()
        } else {
            format!(" --arch {}", args.arch)
        }
    ));
    Ok(Exit::Ok)
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

/// Progress: a bar on a terminal, plain lines otherwise (logs, CI, pipes).
struct Progress {
    terminal: bool,
}

impl Progress {
    fn new() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn line(&self, text: &str) {
        eprintln!("berm vm install: {text}");
    }

    fn bar(&self, kind: ArtifactKind, size: u64, from: &str) -> Option<ProgressBar> {
        if !self.terminal {
            self.line(&format!("{} ({size} bytes) from {from}", kind.name()));
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
        Some(bar)
    }
}

/// The partial file being written and hashed.
struct Sink<'a> {
    kind: ArtifactKind,
    pin: &'a ImagePin,
    dest: PathBuf,
    partial: PathBuf,
    file: Option<File>,
    hasher: Sha256,
    written: u64,
    progress: &'a Progress,
    bar: Option<ProgressBar>,
}

impl<'a> Sink<'a> {
    fn create(
        kind: ArtifactKind,
        pin: &'a ImagePin,
        dest: &Path,
        progress: &'a Progress,
    ) -> anyhow::Result<Self> {
        let dir = dest.parent().context("the store path has no parent")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let partial = dest.with_extension(match dest.extension() {
            Some(ext) => format!("{}.partial", ext.to_string_lossy()),
            None => "partial".into(),
        });
        // Truncated: a partial file left by an interrupted install is started over.
        let file =
            File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
        Ok(Self {
            kind,
            pin,
            dest: dest.to_owned(),
            partial,
            file: Some(file),
            hasher: Sha256::new(),
            written: 0,
            progress,
            bar: None,
        })
    }

    fn start(&mut self, from: &str) {
        self.bar = self.progress.bar(self.kind, self.pin.size, from);
    }

    fn push(&mut self, chunk: &[u8]) -> anyhow::Result<()> {
        self.written += chunk.len() as u64;
        if self.written > self.pin.size {
            bail!(
                "the {} is longer than the pinned {} bytes: refused as tampered",
                self.kind.name(),
                self.pin.size
            );
        }
        self.hasher.update(chunk);
        let file = self.file.as_mut().context("the partial file is closed")?;
        file.write_all(chunk)
            .with_context(|| format!("writing {}", self.partial.display()))?;
        if let Some(bar) = &self.bar {
            bar.set_position(self.written);
        }
        Ok(())
    }

    /// Checks size and digest, then makes the file durable and renames it into place.
    fn finish(&mut self) -> anyhow::Result<()> {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.written < self.pin.size {
            bail!(
                "the {} is truncated: {} of the pinned {} bytes arrived",
                self.kind.name(),
                self.written,
                self.pin.size
            );
        }
        let actual = hex::encode(std::mem::take(&mut self.hasher).finalize());
        if actual != self.pin.sha256.as_str() {
            bail!(
                "the {} has sha256 {actual}, but berm is pinned to {}: refused as tampered",
                self.kind.name(),
                self.pin.sha256
            );
        }
        let file = self.file.take().context("the partial file is closed")?;
        file.sync_all()
            .with_context(|| format!("syncing {}", self.partial.display()))?;
        drop(file);
        std::fs::rename(&self.partial, &self.dest).with_context(|| {
            format!(
                "renaming {} to {}",
                self.partial.display(),
                self.dest.display()
            )
        })?;
        if let Some(dir) = self.dest.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .with_context(|| format!("syncing {}", dir.display()))?;
        }
        Ok(())
    }

    fn abort(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.abandon();
        }
        self.file = None;
        let _ = std::fs::remove_file(&self.partial);
        // The digest's directory, if this install created it and it is now empty.
        if let Some(dir) = self.dest.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn copy_from_dir(
    dir: &Path,
    kind: ArtifactKind,
    pin: &ImagePin,
    file: &str,
    sink: &mut Sink<'_>,
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
    sink.start(&path.display().to_string());
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return Ok(());
        }
        sink.push(&buf[..n])?;
    }
}

async fn download(url: &str, sink: &mut Sink<'_>) -> anyhow::Result<()> {
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
        && length != sink.pin.size
    {
        bail!(
            "{url} announces {length} bytes, but the pinned {} has {}: refused",
            sink.kind.name(),
            sink.pin.size
        );
    }
    sink.start(url);
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.with_context(|| format!("downloading {url}"))?;
        sink.push(&chunk)?;
    }
    Ok(())
}
