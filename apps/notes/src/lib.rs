//! notes: a model's notebook, kept in the program's own keyspace (`kv`).

/// Keeps short notes that outlive the conversation: add, list, search and
/// delete them. Each note has a numeric id and a title; the text is searched
/// case-insensitively.
///
/// # Usage
/// Reach for notes to remember something for later — a decision, a
/// command that worked, a file to come back to — and to look it up again.
/// Needs the `kv` grant.
#[berm_guest::program]
mod notes {
    use berm_guest::kv;
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    struct Note {
        id: u64,
        title: String,
        text: String,
    }

    const NEXT_ID: &[u8] = b"meta/next_id";
    const PREFIX: &str = "note/";

    fn key(id: u64) -> String {
        // Zero-padded so that keys sort by id.
        format!("{PREFIX}{id:016}")
    }

    fn all() -> Result<Vec<Note>, String> {
        let mut notes = Vec::new();
        for key in kv::list(PREFIX.as_bytes()).map_err(|e| e.to_string())? {
            if let Some(bytes) = kv::get(&key).map_err(|e| e.to_string())? {
                notes.push(serde_json::from_slice(&bytes).map_err(|e| e.to_string())?);
            }
        }
        Ok(notes)
    }

    /// Add a note and return it with its id.
    ///
    /// # Arguments
    /// - `title`: a short title
    /// - `text`: the note itself
    pub fn add(title: String, text: String) -> Result<serde_json::Value, String> {
        if title.trim().is_empty() {
            return Err("a note needs a non-empty title".into());
        }
        let id = match kv::get(NEXT_ID).map_err(|e| e.to_string())? {
            Some(bytes) => String::from_utf8_lossy(&bytes).parse::<u64>().unwrap_or(1),
            None => 1,
        };
        let note = Note { id, title, text };
        let bytes = serde_json::to_vec(&note).map_err(|e| e.to_string())?;
        kv::put(key(id).as_bytes(), &bytes).map_err(|e| e.to_string())?;
        kv::put(NEXT_ID, (id + 1).to_string().as_bytes()).map_err(|e| e.to_string())?;
        Ok(serde_json::json!({ "id": note.id, "title": note.title }))
    }

    /// List every note (id and title), oldest first.
    #[berm(read_only)]
    pub fn list() -> Result<serde_json::Value, String> {
        let notes = all()?;
        Ok(notes
            .iter()
            .map(|n| serde_json::json!({ "id": n.id, "title": n.title }))
            .collect())
    }

    /// Find notes whose title or text contains the query (case-insensitive);
    /// returns them whole.
    ///
    /// # Arguments
    /// - `query`: the text to look for
    #[berm(read_only)]
    pub fn search(query: String) -> Result<serde_json::Value, String> {
        let needle = query.to_lowercase();
        let found: Vec<serde_json::Value> = all()?
            .into_iter()
            .filter(|n| {
                n.title.to_lowercase().contains(&needle) || n.text.to_lowercase().contains(&needle)
            })
            .map(|n| serde_json::json!({ "id": n.id, "title": n.title, "text": n.text }))
            .collect();
        Ok(serde_json::Value::Array(found))
    }

    /// Delete a note by id.
    ///
    /// # Arguments
    /// - `id`: the note's id, as `add` or `list` gave it
    #[berm(destructive)]
    pub fn delete(id: u64) -> Result<String, String> {
        match kv::delete(key(id).as_bytes()).map_err(|e| e.to_string())? {
            true => Ok(format!("deleted note {id}")),
            false => Err(format!("there is no note {id}")),
        }
    }
}
