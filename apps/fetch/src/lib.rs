//! fetch: one web page through the host's allowlist (`http`).

/// Fetches web pages from the hosts the operator granted (`net=HOST[:PORT]`).
/// A host outside the grant is refused before anything is sent.
///
/// # Usage
/// Reach for fetch to read a page or an API answer by URL. Only granted
/// hosts answer; a refusal says which host was not granted.
#[berm_guest::program]
mod fetch {
    use berm_guest::http;

    /// A page's status and body.
    #[derive(serde::Serialize)]
    pub struct Page {
        /// The HTTP status.
        pub status: u16,
        /// The body as text (invalid UTF-8 replaced).
        pub body: String,
    }

    /// GET a URL and return its status and body.
    ///
    /// # Arguments
    /// - `url`: an absolute http or https URL on a granted host
    #[berm(read_only)]
    pub fn get(url: String) -> Result<Page, berm_guest::Error> {
        let response = http::get(&url)?;
        Ok(Page {
            status: response.status,
            body: response.text(),
        })
    }
}
