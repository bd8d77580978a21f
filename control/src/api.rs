//! The bodies of the control API's requests and answers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use berm_manifest::Manifest;
use serde::{Deserialize, Serialize};

use crate::Grant;

/// Per-deployment bounds a client may ask for; what is absent takes bermd's
/// defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Wall-clock deadline of one call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// Largest linear memory, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// `PUT /programs/{name}`: deploy an image under a name, replacing what the
/// name held.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployRequest {
    /// The WebAssembly image, base64 (standard alphabet, padded): JSON keeps
    /// one body format for every route.
    pub image: String,
    /// What it may reach; nothing when empty.
    #[serde(default)]
    pub grants: Vec<Grant>,
    /// Bounds for its calls.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// The app folder (canonical path) the program comes from, when `berm deploy --app`
    /// deploys it; absent for a plain deploy. Recorded with the deployment, so that the next
    /// folder deployed under the name can tell whether it is the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_dir: Option<PathBuf>,
    /// The name MCP clients see for a tool, by the tool's own name, instead of
    /// `{program}_{tool}` (an app folder's `[program.serve_as]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub serve_as: BTreeMap<String, String>,
}

impl DeployRequest {
    /// A request carrying `image`, as a plain deploy (no app folder).
    pub fn new(image: &[u8], grants: Vec<Grant>, limits: LimitsSpec) -> DeployRequest {
        DeployRequest {
            image: STANDARD.encode(image),
            grants,
            limits,
            app_dir: None,
            serve_as: BTreeMap::new(),
        }
    }

    /// The same request, recorded as coming from the app folder `dir` (canonical).
    pub fn from_app(mut self, dir: &Path) -> DeployRequest {
        self.app_dir = Some(dir.to_path_buf());
        self
    }

    /// The image bytes, or why the base64 is not valid.
    pub fn image_bytes(&self) -> Result<Vec<u8>, base64::DecodeError> {
        STANDARD.decode(&self.image)
    }
}

/// A deployed program as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgramView {
    /// Its name.
    pub name: String,
    /// `sha256:<hex>` of its image.
    pub digest: String,
    /// What it may reach.
    pub grants: Vec<Grant>,
    /// The bounds its calls run under (bermd's defaults filled in).
    pub limits: LimitsSpec,
    /// Where its compiled code came from when it was last deployed or
    /// restored: `compiled`, `disk_cache` (a restart compiles nothing) or
    /// `memory`.
    pub code_source: String,
    /// What the image claims and imports.
    pub manifest: Manifest,
    /// The app folder it was deployed from (`berm deploy --app`); absent for a plain deploy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_dir: Option<PathBuf>,
    /// The names MCP clients see for some of its tools, by tool, instead of
    /// `{program}_{tool}` (its app folder's `[program.serve_as]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub serve_as: BTreeMap<String, String>,
}

/// What `PUT /programs/{name}` did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployResponse {
    /// The program as deployed (`code_source` says whether it compiled).
    pub program: ProgramView,
    /// The digest the name pointed at before, if it was replaced.
    pub replaced: Option<String>,
}

/// What `DELETE /programs/{name}` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveResponse {
    /// The program removed.
    pub name: String,
    /// Its digest.
    pub digest: String,
}

/// How a call the host completed ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallOutcome {
    /// The tool produced a result.
    Done,
    /// The program ran and reported a failure (MCP's `isError`).
    Failed,
}

/// `POST /tools/{tool}`: the program's answer. A host error
/// (trap, deadline, memory cap, bad arguments) is an [`ErrorBody`] instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallResponse {
    /// Done or failed.
    pub outcome: CallOutcome,
    /// The result, or the failure message.
    pub text: String,
    /// The content blocks the result carried beside its text (images, audio, resources),
    /// described: MCP clients get the blocks themselves.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentSummary>,
}

/// One content block of a result, as `berm call` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentSummary {
    /// Its kind: `text`, `image`, `audio`, `resource_text`, `resource_blob`, `resource_link`.
    pub kind: String,
    /// The resource's URI, for resource kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Its media type, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The size of its body (text, bytes or link name) in bytes.
    pub bytes: usize,
}

/// Every error answer: a message a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: String,
}

/// `PUT /secrets/{program}/{name}`: a secret's value. bermd never sends a
/// value back.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretValue {
    /// The value: text without line breaks, at most 8 KiB.
    pub value: String,
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(..)")
    }
}

/// `GET /secrets/{program}`, and what `PUT`/`DELETE` on one secret answer:
/// the names set for a program, never their values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretList {
    /// The program.
    pub program: String,
    /// The names of its secrets, sorted.
    pub names: Vec<String>,
}

/// `GET /state/{program}`: what a program deployed under this name finds there — the
/// deployment it would replace, the keyspace and the stored secrets it would take over.
/// [`crate::inherit`] says which of it an app folder did not create.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameState {
    /// The name.
    pub program: String,
    /// The deployment the name holds now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeployedFrom>,
    /// Its keyspace (`$BERM_HOME/state/<program>/kv.log`), when the file exists. It stays
    /// when the program is removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<KeyspaceSize>,
    /// The names of its stored secrets (`$BERM_HOME/secrets/<program>/`), sorted. They stay
    /// when the program is removed.
    #[serde(default)]
    pub secrets: Vec<String>,
}

/// A deployment, as far as where it came from goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeployedFrom {
    /// `sha256:<hex>` of its image.
    pub digest: String,
    /// The app folder it was deployed from; absent for a plain deploy (and for deployments
    /// recorded before berm kept the folder).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_dir: Option<PathBuf>,
}

/// How much a keyspace holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyspaceSize {
    /// Keys with a value.
    pub keys: u64,
    /// Bytes of its log on disk.
    pub bytes: u64,
}
