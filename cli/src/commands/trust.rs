//! `berm trust keygen|sign|verify`, and the signature checks before a program from a registry
//! is pulled or deployed: `--verify-key` and the trust policy (berm-trust has the formats and
//! the policy; this module has the flags and the output).
//!
//! ```text
//! berm trust keygen [--dir DIR]
//! berm trust sign REF --key cosign.key [--insecure]
//! berm trust verify REF [--key cosign.pub]… [--insecure]
//! berm trust policy REF [--json]
//! ```

use std::path::{Path, PathBuf};

use anyhow::Context;
use berm_oci::RegistryOptions;
use berm_trust::{Policy, PolicyName, Provenance, PublicKey, Signer, SigningKey, Verified};

use crate::Exit;

/// `berm trust …`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Command {
    /// Write a new key pair, `cosign.key` (encrypted with $COSIGN_PASSWORD, mode 0600) and
    /// `cosign.pub`, in cosign's format; never overwrites.
    Keygen(KeygenArgs),
    /// Sign a pushed program with a cosign private key ($COSIGN_PASSWORD); the signature is
    /// stored where cosign keeps it (`sha256-<digest>.sig`), so `cosign verify` reads it.
    Sign(SignArgs),
    /// Check that a program on a registry is signed by one of the given public keys, or by
    /// what the trust policy requires for it.
    Verify(VerifyArgs),
    /// Show the name the trust policy matches a reference by (its registry normalised) and
    /// the rules that cover it; reads no registry.
    Policy(PolicyArgs),
}

/// `berm trust policy REF`.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// The reference: `host/repo:tag`, `host/repo@sha256:…` or a Docker Hub name.
    #[arg(value_name = "REF")]
    reference: String,
    /// Print the name and the rules as one JSON object.
    #[arg(long)]
    json: bool,
}

/// `berm trust keygen`.
#[derive(Debug, Clone, clap::Args)]
pub struct KeygenArgs {
    /// Where to write `cosign.key` and `cosign.pub`.
    #[arg(long, value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

/// `berm trust sign REF --key KEY`.
#[derive(Debug, Clone, clap::Args)]
pub struct SignArgs {
    /// The pushed program: `host/repo:tag` or `host/repo@sha256:…`.
    #[arg(value_name = "REF")]
    reference: String,
    /// The private key (`cosign.key`, from `berm trust keygen` or `cosign generate-key-pair`).
    #[arg(long, value_name = "KEY")]
    key: PathBuf,
    /// Print what was signed as one JSON object.
    #[arg(long)]
    json: bool,
    /// Registry access.
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
}

/// `berm trust verify REF [--key PUB]…`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// The program: `host/repo:tag` or `host/repo@sha256:…`.
    #[arg(value_name = "REF")]
    reference: String,
    /// A public key (`cosign.pub`); repeat for several, any one suffices. Without one, the
    /// trust policy's rules for REF are checked.
    #[arg(long = "key", value_name = "PUB")]
    keys: Vec<PathBuf>,
    /// Print the signatures that held as one JSON object.
    #[arg(long)]
    json: bool,
    /// Registry access.
    #[command(flatten)]
    registry: super::registry::RegistryArgs,
}

/// Runs `berm trust …`.
pub async fn run(command: Command) -> anyhow::Result<Exit> {
    match command {
        Command::Keygen(args) => {
            let password = berm_trust::password_from_env()?;
            let (private, public) = berm_trust::write_key_pair(&args.dir, &password)?;
            let key = PublicKey::load(&public)?;
            crate::outln!("private key {} (keep it; mode 0600)", private.display());
            crate::outln!("public key  {} ({})", public.display(), key.id());
            Ok(Exit::Ok)
        }
        Command::Sign(args) => {
            let key = load_signing_key(&args.key)?;
            let options = args.registry.options();
            let described = berm_oci::describe(&args.reference, &options)
                .await
                .with_context(|| format!("reading {}", args.reference))?;
            let signed = berm_trust::sign(&described, &key, &options).await?;
            if args.json {
                super::print_json(&signed)?;
            } else {
                crate::outln!("signed     {}", signed.pinned);
                crate::outln!("by         {} ({})", args.key.display(), signed.key);
                crate::outln!("stored at  {}", signed.signatures);
            }
            Ok(Exit::Ok)
        }
        Command::Verify(args) => {
            let options = args.registry.options();
            let described = berm_oci::describe(&args.reference, &options)
                .await
                .with_context(|| format!("reading {}", args.reference))?;
            let mut signers = signers_for(&described.pinned, &args.keys)?;
            if signers.is_empty() {
                anyhow::bail!(
                    "nothing to verify {} against: give --key cosign.pub, or a rule for it in {}",
                    args.reference,
                    policy_path_text()
                );
            }
            let mut verified = Vec::new();
            for signer in signers.drain(..) {
                verified.push(berm_trust::verify(&described, &signer, &options).await?);
            }
            if args.json {
                super::print_json(&serde_json::json!({
                    "pinned": described.pinned,
                    "verified": verified,
                }))?;
            } else {
                crate::outln!("verified   {}", described.pinned);
                for v in &verified {
                    print_verified(v, "");
                }
            }
            Ok(Exit::Ok)
        }
        Command::Policy(args) => show_policy(&args),
    }
}

/// `berm trust policy REF`: the normalised name and each rule covering it, so a person can
/// see what a reference will be held to before anything is pulled.
fn show_policy(args: &PolicyArgs) -> anyhow::Result<Exit> {
    let name = PolicyName::of(&args.reference)?;
    let policy = Policy::load_default()?;
    let rules: Vec<&Signer> = policy
        .as_ref()
        .map(|p| p.requirements_for(&name))
        .unwrap_or_default();
    if args.json {
        let rules: Vec<serde_json::Value> = rules
            .iter()
            .map(|signer| {
                serde_json::json!({
                    "rule": signer.because,
                    "keys": signer.keys.iter().map(|k| serde_json::json!({
                        "file": k.source(),
                        "id": k.id(),
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        super::print_json(&serde_json::json!({
            "reference": args.reference,
            "name": name.to_string(),
            "policy": policy.as_ref().map(|p| &p.path),
            "rules": rules,
        }))?;
        return Ok(Exit::Ok);
    }
    crate::outln!("name       {name}");
    match &policy {
        None => crate::outln!(
            "no trust policy at {}: no signature is required",
            policy_path_text()
        ),
        Some(policy) if rules.is_empty() => crate::outln!(
            "no rule of {} covers it: no signature is required",
            policy.path.display()
        ),
        Some(_) => {
            for signer in &rules {
                let keys: Vec<String> = signer
                    .keys
                    .iter()
                    .map(|k| format!("{} ({})", k.source(), k.id()))
                    .collect();
                crate::outln!("required   {}: {}", signer.because, keys.join(" or "));
            }
        }
    }
    Ok(Exit::Ok)
}

/// Reads a private key with the password from $COSIGN_PASSWORD.
pub fn load_signing_key(path: &Path) -> anyhow::Result<SigningKey> {
    let password = berm_trust::password_from_env()?;
    Ok(SigningKey::load(path, &password)?)
}

/// What must have signed `reference`: the `--verify-key` keys (any one), and each rule of
/// the trust policy that covers it. Empty when nothing is required.
pub(crate) fn signers_for(reference: &str, verify_keys: &[PathBuf]) -> anyhow::Result<Vec<Signer>> {
    let mut signers = Vec::new();
    if !verify_keys.is_empty() {
        let keys = verify_keys
            .iter()
            .map(|k| PublicKey::load(k))
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = verify_keys
            .iter()
            .map(|k| k.display().to_string())
            .collect();
        signers.push(Signer {
            keys,
            because: format!("--verify-key {}", names.join(" --verify-key ")),
        });
    }
    if let Some(policy) = Policy::load_default()? {
        let name = PolicyName::of(reference)?;
        signers.extend(policy.requirements_for(&name).into_iter().cloned());
    }
    Ok(signers)
}

fn policy_path_text() -> String {
    berm_trust::default_policy_path()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "~/.config/berm/trust.toml".into())
}

fn print_verified(v: &Verified, how: &str) {
    eprintln!(
        "signed by  {} ({}), signature {}{how}",
        v.key_source, v.key, v.signature
    );
}

/// A reference whose required signatures held.
pub struct Checked {
    /// The reference to pull it by: pinned to the manifest digest that was verified, so what
    /// is pulled is what was checked (a tag moved in between is not followed); the reference
    /// as given when nothing was required.
    pub reference: String,
    /// The signatures that held, one per requirement.
    pub verified: Vec<Verified>,
}

/// Checks every signature `reference` needs (`verify_keys`, the trust policy) on its
/// registry.
///
/// # Errors
/// When a key or the policy cannot be read, or a required signature does not hold.
pub async fn checked_reference(
    reference: &str,
    verify_keys: &[PathBuf],
    options: &RegistryOptions,
) -> anyhow::Result<Checked> {
    let signers = signers_for(reference, verify_keys)?;
    if signers.is_empty() {
        return Ok(Checked {
            reference: reference.to_string(),
            verified: Vec::new(),
        });
    }
    let described = berm_oci::describe(reference, options)
        .await
        .with_context(|| format!("reading {reference}"))?;
    let mut verified = Vec::new();
    for signer in &signers {
        let held = berm_trust::verify(&described, signer, options)
            .await
            .with_context(|| format!("refusing {reference}: {}", signer.because))?;
        print_verified(&held, "");
        verified.push(held);
    }
    Ok(Checked {
        reference: described.pinned,
        verified,
    })
}

/// Holds a program the store already has, `image`, to every signature required now
/// (`verify_keys`, the trust policy), exactly as if it were pulled: each requirement is met
/// by a signature recorded in `provenance` (the store's record) for the same normalised
/// repository, verified again against the keys required now, or else by one read from the
/// registry, which is then recorded. Whether the bytes were already stored changes where a
/// signature is read from, never whether one is required.
///
/// # Errors
/// When a key, the policy or the record cannot be read, or a required signature does not
/// hold (or, with none recorded, the registry cannot be read).
pub async fn check_stored(
    image: &berm_app::ImageRef,
    provenance: &Path,
    verify_keys: &[PathBuf],
    options: &RegistryOptions,
) -> anyhow::Result<()> {
    let reference = &image.reference;
    let signers = signers_for(reference, verify_keys)?;
    if signers.is_empty() {
        return Ok(());
    }
    let name = PolicyName::of(reference)?;
    let manifest_digest = image.manifest_digest();
    let mut record = Provenance::load(provenance)?;
    let mut unmet = Vec::new();
    for signer in &signers {
        match record.verified_by(&name, &manifest_digest, signer) {
            Some(held) => print_verified(&held, ", as recorded in the program store"),
            None => unmet.push(signer),
        }
    }
    if unmet.is_empty() {
        return Ok(());
    }
    // The reference is pinned, so what the registry describes hashes to the pin.
    let described = berm_oci::describe(reference, options)
        .await
        .with_context(|| {
            format!(
                "refusing {reference}: the store holds it, but no signature recorded for {name} meets {}, and the registry cannot be read to look for one",
                unmet.iter().map(|s| s.because.as_str()).collect::<Vec<_>>().join(", ")
            )
        })?;
    anyhow::ensure!(
        described.manifest_digest == manifest_digest,
        "refusing {reference}: the registry describes the manifest {}, not the pinned {manifest_digest}",
        described.manifest_digest
    );
    for signer in unmet {
        let held = berm_trust::verify(&described, signer, options)
            .await
            .with_context(|| format!("refusing {reference}: {}", signer.because))?;
        print_verified(&held, "");
        record.record(&name, &held);
    }
    record.save(provenance)?;
    Ok(())
}

/// Records in the store's `provenance` the signatures that held for `reference` when it was
/// pulled, so later uses are checked against them without the registry.
///
/// # Errors
/// When the reference does not parse or the record cannot be read or written.
pub fn record_pulled(
    reference: &str,
    provenance: &Path,
    verified: &[Verified],
) -> anyhow::Result<()> {
    if verified.is_empty() {
        return Ok(());
    }
    let name = PolicyName::of(reference)?;
    let mut record = Provenance::load(provenance)?;
    for held in verified {
        record.record(&name, held);
    }
    record.save(provenance)?;
    Ok(())
}
