//! The VM artifact against a real registry (Debian's docker-registry on loopback): `push_vm`
//! then `install_blob` by digest into an empty store, and every refusal leaving nothing
//! behind. The artifacts are generated here with pins computed from them, so these tests run
//! whether or not the real kernel and rootfs have been built (cli/tests/vm.rs covers those).

#[path = "support/registry.rs"]
mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use berm_oci::{
    BlobProgress, RESUME_ATTEMPTS, RegistryOptions, VM_ARTIFACT_TYPE, VM_KERNEL_MEDIA_TYPE,
    VM_ROOTFS_MEDIA_TYPE, VmFile, install_blob, push_vm, vm_tag,
};
use berm_pins::{ArtifactKind, ArtifactStore, ImagePin, Sha256Hex};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use support::{TestRegistry, free_port};

/// Bytes that look like nothing in particular (an LCG), `len` of them.
fn bytes(seed: u32, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 24) as u8
        })
        .collect()
}

fn pin_of(data: &[u8]) -> ImagePin {
    let digest = berm_oci::Digest::of(data).to_string();
    ImagePin {
        sha256: Sha256Hex::parse(&digest["sha256:".len()..]).unwrap(),
        size: data.len() as u64,
    }
}

/// A generated kernel and rootfs with their test pins.
struct Artifacts {
    kernel: Vec<u8>,
    rootfs: Vec<u8>,
}

impl Artifacts {
    fn new() -> Self {
        // Several MiB, so the downloads take many chunks and a resume has a real prefix.
        Self {
            kernel: bytes(1, 3 << 20),
            rootfs: bytes(2, 2 << 20),
        }
    }

    fn pin(&self, kind: ArtifactKind) -> ImagePin {
        pin_of(match kind {
            ArtifactKind::Kernel => &self.kernel,
            ArtifactKind::Rootfs => &self.rootfs,
        })
    }
}

fn anonymous() -> RegistryOptions {
    RegistryOptions::default()
}

async fn push(registry: &TestRegistry, a: &Artifacts) -> berm_oci::PushedVm {
    push_to(registry, a, "berm/vm").await.unwrap()
}

/// Pushes the test artifacts as x86_64 to `repository` of `registry`.
async fn push_to(
    registry: &TestRegistry,
    a: &Artifacts,
    repository: &str,
) -> Result<berm_oci::PushedVm, berm_oci::PushError> {
    push_vm(
        &registry.reference(repository),
        "x86_64",
        VmFile {
            file: "vmlinux".into(),
            bytes: a.kernel.clone(),
        },
        VmFile {
            file: "rootfs.erofs".into(),
            bytes: a.rootfs.clone(),
        },
        &anonymous(),
    )
    .await
}

/// Installs the kernel `pin` names from `repository` to `dest`, with the offset each request
/// started at (a resume is a request from past 0).
async fn install_noting_offsets(
    repository: &str,
    pin: &ImagePin,
    dest: &Path,
) -> (berm_oci::Fetched, Vec<u64>) {
    let mut offsets = Vec::new();
    let fetched = install_blob(repository, "kernel", pin, dest, &anonymous(), &mut |p| {
        if let BlobProgress::Started { offset, .. } = p {
            offsets.push(offset);
        }
    })
    .await
    .unwrap();
    (fetched, offsets)
}

/// The store holds `kernel/<sha256>/vmlinux` and nothing else: no `.partial`, no other file.
fn assert_only_the_kernel(store: &Path) {
    let entries = berm_fixtures::entries(store);
    assert_eq!(entries.len(), 3, "kernel/<sha>/vmlinux: {entries:?}");
}

/// Installs `kind` from `repository` into `store`.
async fn install(
    repository: &str,
    a: &Artifacts,
    kind: ArtifactKind,
    store: &Path,
) -> Result<berm_oci::Fetched, berm_oci::VmFetchError> {
    let pin = a.pin(kind);
    let dest = kind.path_in(&ArtifactStore::at(store), &pin.sha256);
    install_blob(
        repository,
        &format!("x86_64 {}", kind.name()),
        &pin,
        &dest,
        &anonymous(),
        &mut |_| {},
    )
    .await
}

#[tokio::test]
async fn pushed_as_one_artifact_and_installed_by_digest_into_an_empty_store() {
    let registry = TestRegistry::start();
    let a = Artifacts::new();
    let pushed = push(&registry, &a).await;
    let tag = vm_tag(
        "x86_64",
        &a.pin(ArtifactKind::Kernel),
        &a.pin(ArtifactKind::Rootfs),
    );
    assert_eq!(
        pushed.reference,
        registry.reference(&format!("berm/vm:{tag}"))
    );
    assert_eq!(
        pushed.config.kernel.sha256,
        a.pin(ArtifactKind::Kernel).sha256.as_str()
    );

    // The manifest as the registry holds it: the artifact type, both media types, the layer
    // digests equal to the pins, and the annotations.
    let client = oci_client::Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..ClientConfig::default()
    });
    let (body, _) = client
        .pull_manifest_raw(
            &pushed.reference.parse().unwrap(),
            &RegistryAuth::Anonymous,
            &[berm_oci::MANIFEST_MEDIA_TYPE],
        )
        .await
        .unwrap();
    let manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(manifest["artifactType"], VM_ARTIFACT_TYPE, "{manifest}");
    assert_eq!(manifest["layers"][0]["mediaType"], VM_KERNEL_MEDIA_TYPE);
    assert_eq!(manifest["layers"][1]["mediaType"], VM_ROOTFS_MEDIA_TYPE);
    assert_eq!(
        manifest["layers"][0]["digest"],
        format!("sha256:{}", a.pin(ArtifactKind::Kernel).sha256)
    );
    assert_eq!(
        manifest["annotations"]["dev.berm.vm.rootfs.sha256"],
        a.pin(ArtifactKind::Rootfs).sha256.as_str()
    );
    assert_eq!(manifest["annotations"]["dev.berm.vm.arch"], "x86_64");

    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let repository = registry.reference("berm/vm");
    for kind in ArtifactKind::ALL {
        let mut started = Vec::new();
        let pin = a.pin(kind);
        let dest = kind.path_in(&ArtifactStore::at(&store), &pin.sha256);
        let fetched = install_blob(
            &repository,
            kind.name(),
            &pin,
            &dest,
            &anonymous(),
            &mut |p| {
                if let BlobProgress::Started { url, offset } = p {
                    started.push((url, offset));
                }
            },
        )
        .await
        .unwrap();
        assert_eq!(fetched.resumed_from, 0);
        assert_eq!(fetched.downloaded, pin.size);
        assert_eq!(started.len(), 1);
        assert!(
            started[0]
                .0
                .ends_with(&format!("/v2/berm/vm/blobs/sha256:{}", pin.sha256)),
            "{started:?}"
        );
    }
    let store_at = ArtifactStore::at(&store);
    assert_eq!(
        std::fs::read(ArtifactKind::Kernel.path_in(&store_at, &a.pin(ArtifactKind::Kernel).sha256))
            .unwrap(),
        a.kernel
    );
    assert_eq!(
        std::fs::read(ArtifactKind::Rootfs.path_in(&store_at, &a.pin(ArtifactKind::Rootfs).sha256))
            .unwrap(),
        a.rootfs
    );

    // The same pins pushed again: the same tag and the same manifest.
    let again = push(&registry, &a).await;
    assert_eq!(
        again.manifest_digest, pushed.manifest_digest,
        "pushes are reproducible"
    );
}

/// What each refusal does to the kernel's blob on the registry's disk, and what the message
/// must name.
#[tokio::test]
async fn broken_blobs_are_refused_by_name_and_leave_nothing() {
    let a = Artifacts::new();
    let kernel = a.pin(ArtifactKind::Kernel);
    type Break = fn(&Path, &[u8]);
    let cases: [(&str, Break, &[&str]); 5] = [
        (
            "tampered (one byte flipped)",
            |blob, data| {
                let mut d = data.to_vec();
                d[1000] ^= 0x01;
                std::fs::write(blob, d).unwrap();
            },
            &["x86_64 kernel has sha256", "refused as tampered"],
        ),
        (
            "truncated",
            |blob, data| std::fs::write(blob, &data[..data.len() / 2]).unwrap(),
            &[
                "announces 1572864 bytes for the x86_64 kernel",
                "refused as truncated",
            ],
        ),
        (
            "the right size, other bytes",
            |blob, data| std::fs::write(blob, bytes(99, data.len())).unwrap(),
            &["x86_64 kernel has sha256", "refused as tampered"],
        ),
        (
            "one byte longer",
            |blob, data| std::fs::write(blob, [data, &[0u8][..]].concat()).unwrap(),
            &["announces 3145729 bytes", "refused as longer than pinned"],
        ),
        (
            "missing",
            |blob, _| std::fs::remove_file(blob).unwrap(),
            &["cannot fetch the x86_64 kernel sha256:", "was not found"],
        ),
    ];
    for (case, break_it, expected) in cases {
        let registry = TestRegistry::start();
        push(&registry, &a).await;
        break_it(
            &registry.blob_path(&format!("sha256:{}", kernel.sha256)),
            &a.kernel,
        );
        let tmp = tempfile::tempdir().unwrap();
        let store = tmp.path().join("store");
        let err = install(
            &registry.reference("berm/vm"),
            &a,
            ArtifactKind::Kernel,
            &store,
        )
        .await
        .unwrap_err()
        .to_string();
        for needle in expected {
            assert!(err.contains(needle), "{case}: {err}");
        }
        if case == "missing" {
            assert!(err.contains(kernel.sha256.as_str()), "{case}: {err}");
        }
        assert_eq!(
            berm_fixtures::entries(tmp.path()),
            Vec::<PathBuf>::new(),
            "{case}: {err}"
        );
        // The rootfs, untouched on the registry, still installs.
        install(
            &registry.reference("berm/vm"),
            &a,
            ArtifactKind::Rootfs,
            &store,
        )
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn an_unreachable_registry_is_named_and_leaves_nothing() {
    let a = Artifacts::new();
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let closed = format!("127.0.0.1:{}/berm/vm", free_port("127.0.0.1"));
    let err = install(&closed, &a, ArtifactKind::Kernel, &store)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("cannot reach registry `127.0.0.1:"), "{err}");
    assert!(err.contains("x86_64 kernel"), "{err}");
    assert_eq!(
        berm_fixtures::entries(tmp.path()),
        Vec::<PathBuf>::new(),
        "{err}"
    );
}

#[tokio::test]
async fn an_interrupted_download_resumes_from_its_partial_file() {
    let registry = TestRegistry::start();
    let a = Artifacts::new();
    push(&registry, &a).await;
    let repository = registry.reference("berm/vm");
    let pin = a.pin(ArtifactKind::Kernel);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let dest = ArtifactKind::Kernel.path_in(&ArtifactStore::at(&store), &pin.sha256);
    let partial = dest.with_extension("partial");

    // What a killed install leaves: the first third of the kernel.
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    let third = a.kernel.len() / 3;
    std::fs::write(&partial, &a.kernel[..third]).unwrap();
    let (fetched, offsets) = install_noting_offsets(&repository, &pin, &dest).await;
    assert_eq!(fetched.resumed_from, third as u64);
    assert_eq!(fetched.downloaded, pin.size - third as u64);
    assert_eq!(offsets, [third as u64], "one ranged request");
    assert_eq!(std::fs::read(&dest).unwrap(), a.kernel);
    assert!(!partial.exists());

    // A partial file whose prefix is not the kernel's: the resumed result is refused, so the
    // download is tried once more from zero and succeeds.
    std::fs::remove_dir_all(&store).unwrap();
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::write(&partial, vec![0xee; third]).unwrap();
    let (fetched, offsets) = install_noting_offsets(&repository, &pin, &dest).await;
    assert_eq!(offsets, [third as u64, 0]);
    assert_eq!(fetched.resumed_from, 0);
    assert_eq!(std::fs::read(&dest).unwrap(), a.kernel);
    assert_only_the_kernel(&store);
}

#[tokio::test]
async fn a_repository_with_a_tag_is_refused_before_anything_is_sent() {
    let registry = TestRegistry::start();
    let a = Artifacts::new();
    let err = push_to(&registry, &a, "berm/vm:latest")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("names a tag or digest"), "{err}");
}

/// A TCP proxy in front of a registry that cuts each of its next `cuts` connections after
/// `after` bytes have gone from the registry to the client (headers included), as a
/// connection reset midway would, and records every request the client sent.
struct CuttingProxy {
    addr: String,
    cuts: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<u8>>>,
}

impl CuttingProxy {
    fn start(upstream: &str, after: usize, cuts: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let cuts = Arc::new(AtomicUsize::new(cuts));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (upstream, shared_cuts, shared_requests) =
            (upstream.to_owned(), cuts.clone(), requests.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let cut = shared_cuts
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                let (upstream, requests) = (upstream.clone(), shared_requests.clone());
                std::thread::spawn(move || {
                    relay(client, &upstream, cut.then_some(after), requests)
                });
            }
        });
        Self {
            addr,
            cuts,
            requests,
        }
    }

    /// From now on every connection is relayed whole.
    fn honest(&self) {
        self.cuts.store(0, Ordering::SeqCst);
    }

    /// How many requests asked for a range, and the offsets they asked from.
    fn ranges(&self) -> Vec<u64> {
        let sent = String::from_utf8_lossy(&self.requests.lock().unwrap()).to_lowercase();
        sent.split("range: bytes=")
            .skip(1)
            .map(|rest| rest.split('-').next().unwrap().parse().unwrap())
            .collect()
    }
}

/// One client connection relayed to `upstream`; with `cut_after`, both ends are shut after
/// that many bytes towards the client.
fn relay(
    mut client: TcpStream,
    upstream: &str,
    cut_after: Option<usize>,
    requests: Arc<Mutex<Vec<u8>>>,
) {
    let Ok(mut server) = TcpStream::connect(upstream) else {
        return;
    };
    let (mut client_in, mut server_out) =
        (client.try_clone().unwrap(), server.try_clone().unwrap());
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 << 10];
        while let Ok(n) = client_in.read(&mut buf) {
            if n == 0 || server_out.write_all(&buf[..n]).is_err() {
                break;
            }
            requests.lock().unwrap().extend_from_slice(&buf[..n]);
        }
        let _ = server_out.shutdown(Shutdown::Write);
    });
    let mut left = cut_after.unwrap_or(usize::MAX);
    let mut buf = [0u8; 16 << 10];
    while left > 0 {
        let Ok(n) = server.read(&mut buf) else { break };
        let n = n.min(left);
        if n == 0 || client.write_all(&buf[..n]).is_err() {
            break;
        }
        left -= n;
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

/// The kernel's pin, its place in a fresh store under `tmp`, and the offsets of each request
/// `install_blob` made for it through `repository`.
async fn install_kernel_through(
    repository: &str,
    a: &Artifacts,
    store: &Path,
) -> (Result<berm_oci::Fetched, berm_oci::VmFetchError>, Vec<u64>) {
    let pin = a.pin(ArtifactKind::Kernel);
    let dest = ArtifactKind::Kernel.path_in(&ArtifactStore::at(store), &pin.sha256);
    let mut offsets = Vec::new();
    let fetched = install_blob(
        repository,
        "x86_64 kernel",
        &pin,
        &dest,
        &anonymous(),
        &mut |p| {
            if let BlobProgress::Started { offset, .. } = p {
                offsets.push(offset);
            }
        },
    )
    .await;
    (fetched, offsets)
}

#[tokio::test]
async fn a_connection_cut_midway_is_resumed_in_process_with_one_range() {
    let registry = TestRegistry::start();
    let a = Artifacts::new();
    push(&registry, &a).await;
    let proxy = CuttingProxy::start(&registry.addr, 1 << 20, 1);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let (fetched, offsets) =
        install_kernel_through(&format!("{}/berm/vm", proxy.addr), &a, &store).await;
    let fetched = fetched.unwrap();
    assert_eq!(offsets.len(), 2, "{offsets:?}");
    assert_eq!(offsets[0], 0);
    assert!(
        offsets[1] > 0 && offsets[1] < 1 << 20,
        "resumed where the cut left it: {offsets:?}"
    );
    assert_eq!(
        proxy.ranges(),
        [offsets[1]],
        "one Range request, from the cut"
    );
    assert_eq!(
        fetched.resumed_from, 0,
        "nothing came from an earlier install"
    );
    let pin = a.pin(ArtifactKind::Kernel);
    let dest = ArtifactKind::Kernel.path_in(&ArtifactStore::at(&store), &pin.sha256);
    assert_eq!(std::fs::read(&dest).unwrap(), a.kernel);
    assert_only_the_kernel(&store);
}

#[tokio::test]
async fn a_connection_that_keeps_breaking_keeps_its_bytes_for_the_next_install() {
    let registry = TestRegistry::start();
    let a = Artifacts::new();
    push(&registry, &a).await;
    let proxy = CuttingProxy::start(&registry.addr, 512 << 10, usize::MAX);
    let repository = format!("{}/berm/vm", proxy.addr);
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let pin = a.pin(ArtifactKind::Kernel);
    let dest = ArtifactKind::Kernel.path_in(&ArtifactStore::at(&store), &pin.sha256);
    let partial = dest.with_extension("partial");

    let (fetched, offsets) = install_kernel_through(&repository, &a, &store).await;
    let err = fetched.unwrap_err().to_string();
    eprintln!("every attempt broke off: {err}");
    assert_eq!(offsets.len() as u32, 1 + RESUME_ATTEMPTS, "{offsets:?}");
    let kept = std::fs::metadata(&partial).unwrap();
    assert!(kept.len() > *offsets.last().unwrap(), "{err}");
    assert_eq!(kept.permissions().mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::read(&partial).unwrap(),
        a.kernel[..kept.len() as usize],
        "the kept bytes are the kernel's prefix"
    );
    for needle in [
        "x86_64 kernel".to_owned(),
        format!("broke off {} times", 1 + RESUME_ATTEMPTS),
        format!("kept {} bytes in {}", kept.len(), partial.display()),
        "run berm vm install again to resume".to_owned(),
    ] {
        assert!(err.contains(&needle), "{needle}: {err}");
    }
    assert!(!dest.exists(), "{err}");

    // The next install, the connection honest now: one range from the kept bytes.
    proxy.honest();
    let (fetched, offsets) = install_kernel_through(&repository, &a, &store).await;
    let fetched = fetched.unwrap();
    assert_eq!(offsets, [kept.len()]);
    assert_eq!(fetched.resumed_from, kept.len());
    assert_eq!(fetched.downloaded, pin.size - kept.len());
    assert_eq!(std::fs::read(&dest).unwrap(), a.kernel);
    assert!(!partial.exists());
}
