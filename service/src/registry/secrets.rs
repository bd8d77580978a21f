//! A program's secrets: values under `$BERM_HOME/secrets/<program>/`, or files an app folder
//! names (`[program.secrets]`), read before them. The registry owns them, beside the
//! deployments that use them: a secret may be set before the program that uses it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use berm_egress::secret::{SecretError, SecretStore};

use super::Registry;

impl Registry {
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
        let mut all = self.secret_files.lock().unwrap_or_else(|p| p.into_inner());
        all.insert(program.to_string(), files);
    }

    pub(crate) fn secret_store(&self, program: &str) -> SecretStore {
        let files = self
            .secret_files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(program)
            .cloned()
            .unwrap_or_default();
        SecretStore::with_files(self.home().secrets(program), files)
    }
}
