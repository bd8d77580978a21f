//! bermd's side of `http`: a deployment's egress built from its `net=` and
//! `secret:` grants, the CAs HTTPS trusts, and programs' secret values.
//! In the microVM, each request goes to the host dialer over a connection
//! berm-init hands over ([`broker`]).
//!
//! The rules themselves live in `berm-egress`; this module only wires them
//! to `$BERM_HOME` (secret values under `secrets/<program>/`, never beside
//! the state a program can reach) and to bermd's configuration
//! (`--extra-ca`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use berm_control::Grant;
use berm_egress::secret::{Binding, SecretError, SecretStore};
use berm_egress::{
    Caps, Egress, EgressConfig, ErrorCode, FetchError, Forward, Request, Response, Trust,
    TrustError,
};

use crate::service::Service;

pub mod broker;

pub use broker::EgressBroker;

/// How every deployment's egress is set up.
pub struct EgressSetup {
    extra_ca: Vec<PathBuf>,
    caps: Caps,
    /// In the microVM: every fetch goes to the host dialer, on a connection berm-init's
    /// broker makes.
    broker: Option<Arc<EgressBroker>>,
    /// Built on the first deployment that needs it: reading the system's
    /// roots takes milliseconds that a bermd without `http` programs (most
    /// microVM apps) should not spend at start.
    trust: Mutex<Option<Trust>>,
    /// Value files named by a program's `[program.secrets]`, by program: they take
    /// precedence over the values in `$BERM_HOME/secrets/<program>/`.
    secret_files: Mutex<HashMap<String, BTreeMap<String, PathBuf>>>,
}

impl EgressSetup {
    /// Checks the extra CA files now, so a bad one stops bermd at start
    /// with its name rather than failing the first HTTPS request.
    /// With `broker` (bermd in the microVM, `--egress-broker-fd`), requests are checked here
    /// and then dialed by the host ([`HostDialer`]).
    pub fn new(
        extra_ca: Vec<PathBuf>,
        caps: Caps,
        broker: Option<Arc<EgressBroker>>,
    ) -> Result<EgressSetup, TrustError> {
        let trust = if extra_ca.is_empty() {
            None
        } else {
            Some(Trust::new(&extra_ca)?)
        };
        Ok(EgressSetup {
            extra_ca,
            caps,
            broker,
            trust: Mutex::new(trust),
            secret_files: Mutex::new(HashMap::new()),
        })
    }

    fn trust(&self) -> Result<Trust, TrustError> {
        if self.broker.is_some() {
            // The host dialer verifies HTTPS; this side never dials.
            return Ok(Trust::none());
        }
        let mut trust = self.trust.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(trust) = &*trust {
            return Ok(trust.clone());
        }
        let built = Trust::new(&self.extra_ca)?;
        *trust = Some(built.clone());
        Ok(built)
    }

    /// The egress of `program` with `grants`, or `None` when it has no
    /// `net=` or `secret:` grant.
    pub fn for_grants(
        &self,
        program: &str,
        grants: &[Grant],
        secrets: SecretStore,
    ) -> Result<Option<Arc<Egress>>, TrustError> {
        let mut rules = Vec::new();
        let mut bindings = Vec::new();
        for grant in grants {
            match grant {
                Grant::Net(rule) => rules.push(rule.clone()),
                Grant::Secret { name, rule } => bindings.push(Binding {
                    name: name.clone(),
                    rule: rule.clone(),
                }),
                _ => {}
            }
        }
        if rules.is_empty() && bindings.is_empty() {
            return Ok(None);
        }
        tracing::debug!(
            program,
            rules = rules.len(),
            secrets = bindings.len(),
            "egress"
        );
        Ok(Some(Arc::new(Egress::new(EgressConfig {
            rules,
            secrets: bindings,
            store: Some(secrets),
            caps: self.caps,
            trust: self.trust()?,
            // The host dialer serves each program with its own grants and secrets: it is
            // told whose request this is.
            forward: self.broker.as_ref().map(|broker| {
                Arc::new(HostDialer {
                    broker: Arc::clone(broker),
                    caps: self.caps,
                    program: program.to_string(),
                }) as Arc<dyn Forward>
            }),
        }))))
    }
}

/// bermd in the microVM: the guest has no network device, so a checked request of one
/// program goes over vsock to the host dialer in berm-vmm, which holds that program's grants
/// and secrets and dials (`berm_egress::remote`). One connection per request, made by
/// berm-init's broker to this app's port.
#[derive(Debug)]
pub struct HostDialer {
    broker: Arc<EgressBroker>,
    caps: Caps,
    program: String,
}

impl Forward for HostDialer {
    fn forward(
        &self,
        request: &Request,
        left: std::time::Duration,
        holding: &dyn berm_egress::Holding,
    ) -> Result<Response, FetchError> {
        let unreachable = |e: String| FetchError {
            code: ErrorCode::Io,
            message: format!("could not reach the host dialer: {e}"),
        };
        let fd = self.broker.connect(left).map_err(unreachable)?;
        let timeout = Some(left.max(std::time::Duration::from_millis(1)));
        for which in [
            rustix::net::sockopt::Timeout::Recv,
            rustix::net::sockopt::Timeout::Send,
        ] {
            rustix::net::sockopt::set_socket_timeout(&fd, which, timeout)
                .map_err(|e| unreachable(format!("setting its timeout: {e}")))?;
        }
        berm_egress::remote::send(
            std::fs::File::from(fd),
            &self.program,
            request,
            left,
            &self.caps,
            holding,
        )
    }
}

impl Service {
    /// The secret store of `program` (deployed or not: a secret may be set
    /// before the program that uses it).
    fn secrets_of(&self, program: &str) -> Result<SecretStore, SecretError> {
        if !berm_abi::is_valid_program_name(program) {
            return Err(SecretError::Program(program.chars().take(80).collect()));
        }
        Ok(SecretStore::new(self.home().secrets(program)))
    }

    /// Sets secret `name` of `program`. The value is checked (no line
    /// breaks, at most 8 KiB) and never echoed.
    pub fn set_secret(&self, program: &str, name: &str, value: &[u8]) -> Result<(), SecretError> {
        self.secrets_of(program)?.set(name, value)?;
        tracing::info!(program, secret = name, "secret set");
        Ok(())
    }

    /// The names of `program`'s secrets, sorted.
    pub fn list_secrets(&self, program: &str) -> Result<Vec<String>, SecretError> {
        self.secrets_of(program)?.list()
    }

    /// Removes secret `name` of `program`.
    pub fn remove_secret(&self, program: &str, name: &str) -> Result<(), SecretError> {
        self.secrets_of(program)?.remove(name)?;
        tracing::info!(program, secret = name, "secret removed");
        Ok(())
    }

    /// Reads `program`'s secrets from `files` (its `[program.secrets]`) from
    /// now on, before its values in `$BERM_HOME`.
    pub fn use_secret_files(&self, program: &str, files: BTreeMap<String, PathBuf>) {
        let mut all = (self.egress.secret_files)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        all.insert(program.to_string(), files);
    }

    pub(crate) fn secret_store(&self, program: &str) -> SecretStore {
        let files = (self.egress.secret_files)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(program)
            .cloned()
            .unwrap_or_default();
        SecretStore::with_files(self.home().secrets(program), files)
    }
}
