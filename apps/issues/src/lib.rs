//! issues: a GitHub-issues reader that authenticates with a secret it never
//! holds (`{{secret:GITHUB_TOKEN}}`, substituted by the host toward the
//! hosts the secret is bound to).

/// Reads the open issues of a GitHub repository through the GitHub REST API,
/// authenticated with the operator's token. The token is a berm secret: the
/// program only writes its placeholder, and the host sends it to the
/// secret's hosts alone.
///
/// # Usage
/// Reach for issues to see what is open in a repository (`owner/name`).
/// Needs `net=api.github.com` and `secret:GITHUB_TOKEN=api.github.com`, and
/// the token set with `berm secret set issues GITHUB_TOKEN`.
#[berm_guest::program]
mod issues {
    use berm_guest::http;

    /// The API this reads by default.
    const GITHUB_API: &str = "https://api.github.com";

    /// One issue.
    #[derive(serde::Serialize, serde::Deserialize)]
    pub struct Issue {
        /// Its number.
        pub number: u64,
        /// Its title.
        pub title: String,
        /// Its page.
        #[serde(default)]
        pub html_url: String,
    }

    /// List the open issues of a repository (the first 30).
    ///
    /// # Arguments
    /// - `repo`: the repository, `owner/name`
    /// - `api`: the API's base URL (default https://api.github.com; for GitHub Enterprise or a stand-in)
    #[berm(read_only)]
    pub fn list(repo: String, api: Option<String>) -> Result<Vec<Issue>, String> {
        let valid = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        };
        match repo.split_once('/') {
            Some((owner, name)) if valid(owner) && valid(name) => {}
            _ => return Err(format!("`{repo}` is not owner/name")),
        }
        let api = api.as_deref().unwrap_or(GITHUB_API).trim_end_matches('/');
        let url = format!("{api}/repos/{repo}/issues?state=open");
        let authorization = format!("Bearer {}", http::secret("GITHUB_TOKEN"));
        let response = http::fetch(
            "GET",
            &url,
            &[
                ("authorization", &authorization),
                ("accept", "application/vnd.github+json"),
            ],
            &[],
        )
        .map_err(|e| e.to_string())?;
        if response.status != 200 {
            return Err(format!(
                "GitHub answered {}: {}",
                response.status,
                response.text().chars().take(500).collect::<String>()
            ));
        }
        serde_json::from_slice(&response.body)
            .map_err(|e| format!("GitHub's answer is not a list of issues: {e}"))
    }
}
