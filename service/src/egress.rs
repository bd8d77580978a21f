//! bermd's side of `http`: a deployment's egress built from its `net=` and
//! `secret:` grants, the CAs HTTPS trusts, and programs' secret values.
//! In the microVM, each request goes to the host dialer over a connection
//! berm-init hands over ([`broker`]).
//!
//! The rules themselves live in `berm-egress`; this module only wires them
//! to `$BERM_HOME` (secret values under `secrets/<program>/`, never beside
//! the state a program can reach) and to bermd's configuration
//! (`--extra-ca`).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use berm_control::Grant;
use berm_egress::secret::{Binding, SecretStore};
use berm_egress::{
    Caps, Egress, EgressConfig, ErrorCode, FetchError, Forward, Request, Response, Trust,
    TrustError,
};

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
