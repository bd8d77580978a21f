//! files: read, write, list and search files in the one directory bermd
//! granted (`fs`).

/// Works with the files of one directory that the operator granted: read and
/// write files, list directories, and grep for a pattern. Paths are relative
/// to that directory; anything that leads out of it is refused.
///
/// # Usage
/// Reach for files to look at or change a project's files: list_dir to see
/// what is there, grep to find where something is, read_file to read it and
/// write_file to change it. Needs the `fs` grant (`fs=DIR:ro` makes it
/// read-only).
#[berm_guest::program]
mod files {
    use berm_guest::fs;

    /// Most matches grep reports.
    const MAX_MATCHES: usize = 200;
    /// Most files grep looks at.
    const MAX_FILES: usize = 2_000;

    /// Read a UTF-8 text file.
    ///
    /// # Arguments
    /// - `path`: the file, relative to the granted directory
    #[berm(read_only)]
    pub fn read_file(path: String) -> Result<String, berm_guest::Error> {
        let bytes = fs::read(&path)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Write a text file, replacing it if it exists (atomically) and creating
    /// missing directories.
    ///
    /// # Arguments
    /// - `path`: the file, relative to the granted directory
    /// - `content`: the new contents
    #[berm(destructive)]
    pub fn write_file(path: String, content: String) -> Result<String, berm_guest::Error> {
        fs::write(&path, content.as_bytes())?;
        Ok(format!("wrote {} bytes to {path}", content.len()))
    }

    /// List a directory: each entry's name, kind (file, dir, symlink) and
    /// size.
    ///
    /// # Arguments
    /// - `path`: the directory, relative to the granted one (empty for the root)
    #[berm(read_only)]
    pub fn list_dir(path: Option<String>) -> Result<Vec<fs::Entry>, berm_guest::Error> {
        fs::list(path.as_deref().unwrap_or(""))
    }

    /// Find lines containing a pattern (plain text, case-sensitive) in the
    /// files under a directory; returns `path:line: text` lines.
    ///
    /// # Arguments
    /// - `pattern`: the text to look for
    /// - `path`: where to start, relative to the granted directory (empty for the root)
    #[berm(read_only)]
    pub fn grep(pattern: String, path: Option<String>) -> Result<String, berm_guest::Error> {
        let mut out = Vec::new();
        let mut pending = vec![path.unwrap_or_default()];
        let mut files = 0;
        while let Some(dir) = pending.pop() {
            for entry in fs::list(&dir)? {
                let full = if dir.is_empty() {
                    entry.name.clone()
                } else {
                    format!("{dir}/{}", entry.name)
                };
                match entry.kind.as_str() {
                    "dir" => pending.push(full),
                    "file" if files < MAX_FILES => {
                        files += 1;
                        let Ok(bytes) = fs::read(&full) else { continue };
                        let text = String::from_utf8_lossy(&bytes);
                        for (number, line) in text.lines().enumerate() {
                            if line.contains(&pattern) {
                                out.push(format!("{full}:{}: {line}", number + 1));
                                if out.len() == MAX_MATCHES {
                                    return Ok(out.join("\n"));
                                }
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        out.sort();
        Ok(out.join("\n"))
    }
}
