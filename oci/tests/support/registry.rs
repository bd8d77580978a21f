//! A real registry for tests: Debian's `docker-registry` (distribution
//! 2.8), started on a free port with filesystem storage in a temporary
//! directory, killed when dropped. Shared by berm-oci's and berm-index's
//! tests through `#[path]`.

#![allow(dead_code)]

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `docker-registry` serving `addr`.
pub struct TestRegistry {
    child: Child,
    /// `host:port`, as it goes into a reference.
    pub addr: String,
    dir: tempfile::TempDir,
}

/// The binary Debian's `docker-registry` package installs.
const BINARY: &str = "docker-registry";

impl TestRegistry {
    /// A registry on 127.0.0.1 with anonymous access.
    pub fn start() -> TestRegistry {
        TestRegistry::start_with("127.0.0.1", None)
    }

    /// A registry on 127.0.0.1 that requires HTTP basic auth as `user`.
    pub fn start_with_basic_auth(user: &str, password: &str) -> TestRegistry {
        TestRegistry::start_with("127.0.0.1", Some((user, password)))
    }

    fn start_with(ip: &str, basic: Option<(&str, &str)>) -> TestRegistry {
        let dir = tempfile::tempdir().expect("temporary directory");
        let port = free_port(ip);
        let addr = if ip.contains(':') {
            format!("[{ip}]:{port}")
        } else {
            format!("{ip}:{port}")
        };
        let storage = dir.path().join("storage");
        let auth = match basic {
            None => String::new(),
            Some((user, password)) => {
                let hash = bcrypt::hash_with_result(password, 4)
                    .expect("bcrypt")
                    .format_for_version(bcrypt::Version::TwoY);
                let htpasswd = dir.path().join("htpasswd");
                std::fs::write(&htpasswd, format!("{user}:{hash}\n")).expect("htpasswd");
                format!(
                    "auth:\n  htpasswd:\n    realm: berm-test\n    path: {}\n",
                    htpasswd.display()
                )
            }
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n  secret: berm-test-secret\n{auth}",
            storage.display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).expect("registry config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("log file");
        let child = Command::new(BINARY)
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start `{BINARY}` ({e}): install it with scripts/test-dist (apt-get install docker-registry)")
            });
        let mut registry = TestRegistry { child, addr, dir };
        registry.wait_ready(ip, port);
        registry
    }

    fn wait_ready(&mut self, ip: &str, port: u16) {
        let target = SocketAddr::new(ip.parse().expect("ip"), port);
        let log = self.dir.path().join("registry.log");
        let log = || std::fs::read_to_string(&log).unwrap_or_default();
        let child = &mut self.child;
        berm_fixtures::wait_until(
            Duration::from_secs(20),
            Duration::from_millis(25),
            || {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("docker-registry exited with {status}:\n{}", log());
                }
                let Ok(mut s) = TcpStream::connect_timeout(&target, Duration::from_millis(200))
                else {
                    return false;
                };
                // A full HTTP exchange, so the server is really serving.
                let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
                let mut buf = [0u8; 12];
                std::io::Read::read(&mut s, &mut buf).is_ok_and(|n| n > 0)
            },
            || format!("docker-registry did not start:\n{}", log()),
        );
    }

    /// What the registry wrote to stdout and stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// The file the registry keeps the blob `sha256:<hex>` in.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("sha256 digest");
        self.dir
            .path()
            .join("storage/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// A reference to `repo:tag` on this registry.
    pub fn reference(&self, repo_and_tag: &str) -> String {
        format!("{}/{repo_and_tag}", self.addr)
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on right now (the kernel's pick, released).
pub fn free_port(ip: &str) -> u16 {
    let listener = TcpListener::bind((ip, 0)).expect("bind a free port");
    listener.local_addr().expect("local addr").port()
}

/// The example program `echo`, built by scripts/build-apps.sh.
pub fn program(name: &str) -> (PathBuf, Vec<u8>) {
    (
        berm_fixtures::example_path(name),
        berm_fixtures::example(name),
    )
}
