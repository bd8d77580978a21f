//! `http.fetch` from inside the microVM, booted for real: the guest has no network device, so
//! app i's bermd hands each request to berm-vmm's egress dialer over vsock port 6000+i (on a
//! connection berm-init's egress broker makes and hands over), which enforces the app's grants
//! as the host read them.
//!
//! Like vm.rs, each test prints `SKIPPED: <why>` only where nothing can boot the guest, and
//! fails instead under `BERM_VM_REQUIRE=1`.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use berm::GuestArch;
use berm_abi::grant::Grant;
use berm_egress::testing::{Reply, TestServer};
use berm_vm_protocol::{AppReady, Landlock, ProbeReport};
use common::{
    BOOT, Mcp, READY, Vmm, app_folder, first_host_event, guest_event_where, probe_binary,
    scratch_to_boot,
};
use serde_json::{Value, json};

#[test]
fn fetch_in_the_vm_reaches_the_granted_port_through_the_host_dialer_and_nothing_else() {
    fetch_through_the_dialer(GuestArch::HOST);
}

/// The same on an aarch64 guest (the one a Mac boots), emulated by QEMU on an x86_64 host.
#[test]
fn fetch_in_the_vm_reaches_the_granted_port_through_the_host_dialer_on_aarch64() {
    fetch_through_the_dialer(GuestArch::Aarch64);
}

fn fetch_through_the_dialer(arch: GuestArch) {
    let Some(tmp) = scratch_to_boot(arch) else {
        return;
    };
    let page = TestServer::http(|seen| Reply::ok(format!("the page at {}", seen.path)));
    let other = TestServer::http(|_| Reply::ok("must not be reached"));
    let grant = format!("net=127.0.0.1:{}", page.port());
    let toml = format!(
        "name = \"fetch\"\n[limits]\ncpu = 0.5\nmemory_mb = 128\npids = 64\n\n\
         [[program]]\nname = \"fetch\"\nwasm = \"fetch.wasm\"\ngrants = [\"{grant}\"]\n"
    );
    let app = app_folder(tmp.path(), "fetch", &["fetch"], &toml);
    let mut vmm = Vmm::start(
        &["--app", app.to_str().unwrap(), "--arch", arch.name()],
        &[],
    );
    vmm.wait_line(
        "app_ready of fetch",
        BOOT + READY,
        guest_event_where!(AppReady, |e: &AppReady| e.app == "fetch"),
    );

    // The measurement line records the app's grants; the dialer listens on its port, confined.
    let measured = first_host_event!(vmm, Measurements);
    assert_eq!(
        measured.apps[0].programs[0].grants,
        [grant.parse::<Grant>().unwrap()],
        "{measured:?}"
    );
    let endpoints = first_host_event!(vmm, Endpoints);
    assert_eq!(endpoints.egress[0].port, 6000, "{endpoints:?}");
    let socket = endpoints.egress[0].socket.clone();
    assert_eq!(socket, vmm.run_dir.join("vsock.sock_6000"));
    let sandbox = first_host_event!(vmm, HostSandbox);
    let dialer = common::child_named(&sandbox.children, "berm-vmm dial");
    assert_eq!(dialer.seccomp, "allow_list berm-vmm-dialer");
    // Measured by the dialer itself once confined, and sent after `ready`.
    assert_eq!(dialer.measured_by, "self_report", "{dialer:?}");
    assert_eq!(dialer.landlock, Landlock::FullyEnforced, "{dialer:?}");
    assert!(dialer.no_new_privs, "{dialer:?}");
    assert_eq!(dialer.seccomp_mode, "filter", "{dialer:?}");
    // The vsock device may connect (to the dialer) only in a run like this one, and only in
    // the view of its policy's paths: its probe's connect to a socket outside the run dir
    // (one berm-vmm bound in the temp dir) finds nothing there.
    let device = sandbox
        .children
        .iter()
        .find(|c| {
            c.seccomp == "allow_list vhost-device-vsock-egress"
                || c.seccomp == "allow_list krun-enter-egress"
        })
        .unwrap_or_else(|| panic!("no egress vsock device: {sandbox:?}"));
    eprintln!("egress vsock device: {device:?}");
    assert_eq!(device.view.as_deref(), Some("policy_paths"), "{device:?}");
    assert_eq!(
        device.connect_outside.as_deref(),
        Some("ENOENT"),
        "{device:?}"
    );
    assert_eq!(device.landlock, Landlock::FullyEnforced, "{device:?}");
    if device.measured_by == "proc_status+probe" {
        assert_eq!(device.read_outside.as_deref(), Some("EACCES"), "{device:?}");
    }
    // The device itself (not only its probe) runs in a mount namespace of its own, whose
    // root holds the run dir, with the dialer's socket, and not the user's files.
    let pid = device.pid;
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap();
    assert_ne!(namespace(&pid.to_string()), namespace("self"));
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let seen_by_device = |path: &Path| root.join(path.strip_prefix("/").unwrap());
    assert!(seen_by_device(&socket).exists(), "{socket:?}");
    assert!(!seen_by_device(Path::new("/etc/passwd")).exists());
    // QEMU's list has no connect at all.
    for child in &sandbox.children {
        if child.role == "qemu" {
            assert_eq!(child.connect_outside.as_deref(), Some("EPERM"), "{child:?}");
            assert_eq!(child.view.as_deref(), Some("host"), "{child:?}");
        }
    }

    // The granted port answers with the page, fetched by the host dialer.
    let mut mcp = Mcp::connect(&vmm.run_dir.join("rpc-0.sock"));
    let (out, is_error) = mcp.call(
        "fetch_get",
        json!({"url": format!("{}/hello", page.origin(false))}),
    );
    assert!(!is_error, "{out}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(answer, json!({"status": 200, "body": "the page at /hello"}));
    assert_eq!(page.seen().len(), 1);

    // Another port is refused (denied), and that server sees no connection.
    let (out, is_error) = mcp.call(
        "fetch_get",
        json!({"url": format!("{}/", other.origin(false))}),
    );
    assert!(is_error, "{out}");
    assert!(
        out.contains("is not in this program's net grants") && out.contains("denied"),
        "{out}"
    );

    // A guest that skips its own check (what a compromised bermd would do) writes straight to
    // the dialer's socket: the host refuses by its own copy of the grants.
    let request = berm_egress::Request {
        method: "GET".into(),
        url: format!("{}/", other.origin(false)),
        headers: Vec::new(),
        body: Vec::new(),
    };
    let stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let refused = berm_egress::remote::send(
        &stream,
        "fetch",
        &request,
        Duration::from_secs(10),
        &berm_egress::Caps::default(),
        &berm_egress::Unbounded,
    )
    .unwrap_err();
    assert_eq!(refused.code, berm_egress::ErrorCode::Denied, "{refused:?}");
    assert!(
        refused.message.contains("not in this program's net grants"),
        "{}",
        refused.message
    );
    assert_eq!(other.connections(), 0, "the other server was reached");

    vmm.shut_down();
    // The record keeps what was measured, and verifies: the device ran in its view.
    let record = berm_attest::Record::from_run_dir(&vmm.run_dir).unwrap();
    let kept = record
        .host_sandbox
        .as_ref()
        .unwrap()
        .children
        .iter()
        .find(|c| c.role == device.role)
        .unwrap();
    assert_eq!(kept.view.as_deref(), Some("policy_paths"), "{kept:?}");
    assert_eq!(kept.connect_outside.as_deref(), Some("ENOENT"), "{kept:?}");
    let verdict = berm_attest::verify(
        &record.to_value(),
        &berm_attest::Pins::compiled_in().unwrap(),
    );
    assert!(verdict.ok, "{:#?}", verdict.problems);
}

/// The guest trying on its own, under an app's confinement with net grants (the enforcement
/// probe, booted separately: its fork row fills the app's pids.max for a while): no socket at
/// all (seccomp `EPERM`; the guest kernel has no network device either), not even vsock: its
/// egress connections come from berm-init, to its own app's port.
#[test]
fn a_guest_program_cannot_open_a_network_socket_of_its_own() {
    let arch = GuestArch::HOST;
    let Some(tmp) = scratch_to_boot(arch) else {
        return;
    };
    let toml = "name = \"fetch\"\n[[program]]\nname = \"fetch\"\nwasm = \"fetch.wasm\"\n\
                grants = [\"net=127.0.0.1:9\"]\n";
    let app = app_folder(tmp.path(), "fetch", &["fetch"], toml);
    let probe = probe_binary(arch);
    let mut vmm = Vmm::start(
        &[
            &["--app", app.to_str().unwrap()][..],
            &common::probe_in_app0(&probe),
        ]
        .concat(),
        &[],
    );
    let report = vmm.wait_line(
        "probe_report",
        READY,
        guest_event_where!(ProbeReport, |_: &ProbeReport| true),
    );
    let checks = &report.checks;
    for row in [
        "http on its own: socket AF_INET + connect 10.0.2.2:80",
        "raw socket AF_INET SOCK_RAW",
        "socket AF_VSOCK (egress connections come from berm-init's broker)",
    ] {
        let check = checks
            .iter()
            .find(|c| c.name == row)
            .unwrap_or_else(|| panic!("no probe row {row:?}: {report:?}"));
        assert!(check.pass, "{check:?}");
        assert_eq!(check.outcome, "EPERM", "{check:?}");
    }
    vmm.shut_down();
}

/// Sends one request on the dialer's socket the way a guest's bermd does and returns the
/// reply's kind byte and payload.
/// A dialer reply that refused with `code`, its message holding `part`.
fn assert_refused((kind, message): (u8, Vec<u8>), code: berm_egress::ErrorCode, part: &str) {
    let message = String::from_utf8_lossy(&message);
    assert_eq!(kind, code as u8, "{message}");
    assert!(message.contains(part), "{message}");
}

fn ask_dialer(socket: &Path, url: &str) -> (u8, Vec<u8>) {
    ask_dialer_with(socket, "p", url, Vec::new())
}

/// What the dialer on `socket` answers `program`'s GET of `url` with `headers`.
fn ask_dialer_with(
    socket: &Path,
    program: &str,
    url: &str,
    headers: Vec<(String, Vec<u8>)>,
) -> (u8, Vec<u8>) {
    let request = berm_egress::Request {
        method: "GET".into(),
        url: url.into(),
        headers,
        body: Vec::new(),
    };
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let reply = berm_egress::remote::send(
        &mut stream,
        program,
        &request,
        Duration::from_secs(10),
        &berm_egress::Caps::default(),
        &berm_egress::Unbounded,
    );
    match reply {
        Ok(response) => (0, response.body),
        Err(e) => (e.code as u8, e.message.into_bytes()),
    }
}

/// The dialer on its own (no VM): confined as in a run, it serves each app's socket with that
/// app's grants only, and a hostile guest's garbage gets an error, not a hang.
#[test]
fn the_dialer_serves_each_socket_with_its_own_apps_grants_only() {
    let page = TestServer::http(|seen| {
        Reply::ok(format!(
            "the page at {} for {}",
            seen.path,
            seen.header("authorization").unwrap_or("nobody")
        ))
    });
    let other = TestServer::http(|_| Reply::ok("must not be reached"));
    let tmp = tempfile::tempdir().unwrap();
    // App 0's secret, held on the host only (`berm secret set fetch tok` writes the same file).
    let secrets = tmp.path().join("secrets");
    berm_egress::secret::SecretStore::new(&secrets)
        .set("tok", b"s3cret-value")
        .unwrap();
    let page_rule = format!("127.0.0.1:{}", page.port());
    let plan = berm_vmm::dialer::DialerPlan {
        apps: vec![
            dialer_app(
                tmp.path(),
                0,
                vec![berm_vmm::dialer::ProgramEgress {
                    // Bound for cleartext explicitly: the test server speaks http.
                    secrets: vec![("tok".into(), format!("http://{page_rule}"))],
                    store: secrets.clone(),
                    ..program("p", vec![page_rule.clone()])
                }],
            ),
            dialer_app(
                tmp.path(),
                1,
                vec![program("p", vec![format!("127.0.0.1:{}", other.port())])],
            ),
        ],
        sandbox: true,
        own: Vec::new(),
    };
    let _dialer = Dialer::start(&plan);
    let (app0, app1) = (&plan.apps[0].socket, &plan.apps[1].socket);

    let (kind, body) = ask_dialer(app0, &format!("{}/x", page.origin(false)));
    assert_eq!(
        (kind, String::from_utf8_lossy(&body).as_ref()),
        (0, "the page at /x for nobody")
    );
    // The secret is substituted on the host, toward its host only.
    let bearer = vec![(
        "authorization".to_string(),
        b"Bearer {{secret:tok}}".to_vec(),
    )];
    let (kind, body) = ask_dialer_with(
        app0,
        "p",
        &format!("{}/s", page.origin(false)),
        bearer.clone(),
    );
    assert_eq!(
        (kind, String::from_utf8_lossy(&body).as_ref()),
        (0, "the page at /s for Bearer s3cret-value")
    );
    // App 1 has no such secret: its socket refuses the placeholder.
    assert_refused(
        ask_dialer_with(app1, "p", &format!("{}/", other.origin(false)), bearer),
        berm_egress::ErrorCode::Denied,
        "no secret `tok` is bound",
    );
    // App 0's socket does not carry app 1's grant, whatever the guest writes.
    assert_refused(
        ask_dialer(app0, &format!("{}/", other.origin(false))),
        berm_egress::ErrorCode::Denied,
        "not in this program's net grants",
    );
    assert_eq!(other.connections(), 0);
    let (kind, _) = ask_dialer(app1, &format!("{}/", other.origin(false)));
    assert_eq!(kind, 0);
    // A length past the cap: too_large at once.
    let mut stream = std::os::unix::net::UnixStream::connect(app0).unwrap();
    stream.write_all(&[0xff; 8]).unwrap();
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).unwrap();
    assert_eq!(reply[0], berm_egress::ErrorCode::TooLarge as u8);
    // A guest holding the app's connections open (saying nothing) gets the next one turned
    // away at once, not queued.
    let idle: Vec<_> = (0..berm_vmm::dialer::MAX_CONNECTIONS_PER_APP)
        .map(|_| std::os::unix::net::UnixStream::connect(app0).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    assert_refused(
        ask_dialer(app0, &format!("{}/", page.origin(false))),
        berm_egress::ErrorCode::Io,
        "requests open at the host dialer",
    );
    // The other app is not affected.
    let (kind, _) = ask_dialer(app1, &format!("{}/", other.origin(false)));
    assert_eq!(kind, 0);
    drop(idle);
    std::thread::sleep(Duration::from_millis(200));
    // Still serving after all that.
    let (kind, _) = ask_dialer(app0, &format!("{}/y", page.origin(false)));
    assert_eq!(kind, 0);
    assert_eq!(
        other.connections(),
        2,
        "only app 1's own requests reached it"
    );
}

/// Two programs of one app each bind `TOKEN` to the same host, each with its own value file:
/// each program's requests carry its own value, never the other's, and a program the app
/// does not hold is refused by name. The dialer on its own, confined as in a run (no VM).
#[test]
fn two_programs_of_one_app_binding_one_name_each_send_their_own_value() {
    use std::os::unix::fs::PermissionsExt;
    let page = TestServer::http(|seen| {
        Reply::ok(seen.header("authorization").unwrap_or("nobody").to_string())
    });
    let tmp = tempfile::tempdir().unwrap();
    let rule = format!("127.0.0.1:{}", page.port());
    let program_with_token = |name: &str| {
        let file = tmp.path().join(format!("{name}-token"));
        std::fs::write(&file, format!("value-of-{name}\n")).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        berm_vmm::dialer::ProgramEgress {
            secrets: vec![("TOKEN".into(), format!("http://{rule}"))],
            secret_files: [("TOKEN".to_string(), file)].into(),
            ..program(name, vec![rule.clone()])
        }
    };
    // A third program's file appears only once the dialer is confined, beside the others:
    // Landlock granted the files, not their directory, so it stays unreadable.
    let late = tmp.path().join("late-token");
    let plan = berm_vmm::dialer::DialerPlan {
        apps: vec![dialer_app(
            tmp.path(),
            0,
            vec![
                program_with_token("one"),
                program_with_token("two"),
                berm_vmm::dialer::ProgramEgress {
                    secret_files: [("TOKEN".to_string(), late.clone())].into(),
                    ..program_with_token("late")
                },
            ],
        )],
        sandbox: true,
        own: Vec::new(),
    };
    std::fs::remove_file(tmp.path().join("late-token")).unwrap();
    let _dialer = Dialer::start(&plan);
    std::fs::write(&late, "value-of-late\n").unwrap();
    std::fs::set_permissions(&late, std::fs::Permissions::from_mode(0o600)).unwrap();
    let socket = &plan.apps[0].socket;
    let bearer = vec![("authorization".to_string(), b"{{secret:TOKEN}}".to_vec())];
    let url = format!("{}/", page.origin(false));
    for name in ["one", "two", "one"] {
        let (kind, body) = ask_dialer_with(socket, name, &url, bearer.clone());
        assert_eq!(
            (kind, String::from_utf8_lossy(&body).as_ref()),
            (0, format!("value-of-{name}").as_str())
        );
    }
    assert_refused(
        ask_dialer_with(socket, "late", &url, bearer.clone()),
        berm_egress::ErrorCode::Io,
        "secret `TOKEN` could not be read on the host (see its log)",
    );
    assert_refused(
        ask_dialer_with(socket, "three", &url, bearer),
        berm_egress::ErrorCode::Denied,
        "program `three` of this app has no net or secret grants at the host dialer",
    );
}

/// The dialer holds berm-vmm's own paths too (handed over in its plan): a value file in
/// berm's home (another program's stored value) is refused when it is read, confined as in
/// a run, while a program's own file beside it is sent.
#[test]
fn the_dialer_refuses_a_value_file_of_berms_own() {
    use std::os::unix::fs::PermissionsExt;
    let page = TestServer::http(|seen| {
        Reply::ok(seen.header("authorization").unwrap_or("nobody").to_string())
    });
    let tmp = tempfile::tempdir().unwrap();
    let rule = format!("127.0.0.1:{}", page.port());
    let home = tmp.path().join("home");
    let store = home.join("secrets/other");
    berm_egress::secret::SecretStore::new(&store)
        .set("TOKEN", b"stored-for-other")
        .unwrap();
    let mine = tmp.path().join("mine-token");
    std::fs::write(&mine, "value-of-mine\n").unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_file = |name: &str, file: &Path| berm_vmm::dialer::ProgramEgress {
        secrets: vec![("TOKEN".into(), format!("http://{rule}"))],
        secret_files: [("TOKEN".to_string(), file.to_path_buf())].into(),
        ..program(name, vec![rule.clone()])
    };
    let plan = berm_vmm::dialer::DialerPlan {
        apps: vec![dialer_app(
            tmp.path(),
            0,
            vec![
                with_file("mine", &mine),
                with_file("thief", &store.join("TOKEN")),
            ],
        )],
        sandbox: true,
        own: vec![berm_app::own_paths::OwnPath {
            path: home.clone(),
            what: berm_app::own_paths::STATE.into(),
        }],
    };
    let _dialer = Dialer::start(&plan);
    let socket = &plan.apps[0].socket;
    let bearer = vec![("authorization".to_string(), b"{{secret:TOKEN}}".to_vec())];
    let url = format!("{}/", page.origin(false));
    let (kind, body) = ask_dialer_with(socket, "mine", &url, bearer.clone());
    assert_eq!(
        (kind, String::from_utf8_lossy(&body).as_ref()),
        (0, "value-of-mine")
    );
    assert_refused(
        ask_dialer_with(socket, "thief", &url, bearer),
        berm_egress::ErrorCode::Io,
        "secret `TOKEN` could not be read on the host (see its log)",
    );
    assert_eq!(
        page.connections(),
        1,
        "only the program's own value was sent"
    );
}

/// A program of the dialer's plan with `rules` and no secrets (its store in a place that
/// holds nothing).
fn program(name: &str, rules: Vec<String>) -> berm_vmm::dialer::ProgramEgress {
    berm_vmm::dialer::ProgramEgress {
        name: name.into(),
        rules,
        secrets: Vec::new(),
        secret_files: Default::default(),
        store: PathBuf::from("/nonexistent/berm-test-store"),
    }
}

/// App `index` of the dialer's plan, its socket in `dir`.
fn dialer_app(
    dir: &Path,
    index: u32,
    programs: Vec<berm_vmm::dialer::ProgramEgress>,
) -> berm_vmm::dialer::AppEgress {
    berm_vmm::dialer::AppEgress {
        index,
        name: format!("app{index}"),
        socket: dir.join(format!("vsock.sock_{}", 6000 + index)),
        programs,
    }
}

/// The dialer, killed when the test ends (also when it fails).
struct Dialer(std::process::Child);

impl Dialer {
    /// `berm-vmm dial` with `plan`, once it says it is ready.
    fn start(plan: &berm_vmm::dialer::DialerPlan) -> Dialer {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        let mut dialer = Dialer(
            Command::new(env!("CARGO_BIN_EXE_berm-vmm"))
                .arg("dial")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let child = &mut dialer.0;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&serde_json::to_vec(plan).unwrap())
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // Confined, it says how after `ready`: its own measurement, once in force.
        let line = line.strip_suffix('\n').unwrap();
        if plan.sandbox {
            let said = line
                .strip_prefix("ready ")
                .unwrap_or_else(|| panic!("{line:?}"));
            let report = berm_vmm::measure::SelfReport::decode(said.as_bytes()).unwrap();
            assert_eq!(
                report.landlock,
                berm_vm_protocol::host::Landlock::FullyEnforced,
                "{line}"
            );
            assert!(report.status.no_new_privs, "{line}");
            assert_eq!(
                report.status.seccomp,
                berm_vmm::measure::SeccompMode::Filter,
                "{line}"
            );
        } else {
            assert_eq!(line, "ready");
        }
        dialer
    }
}

impl Drop for Dialer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
