//! `rewind.toml`: settings kept beside a store, read each time its workspace is mounted.

use std::path::Path;

use serde::Deserialize;

use crate::history::retention::Retention;

/// The file's name, in the store directory.
pub const FILE: &str = "rewind.toml";

/// Written into a new store so that the settings can be found where they take effect.
const TEMPLATE: &str = r#"# rewind settings for this store, read each time the workspace is mounted.
#
# Retention: uncomment to have the daemon remove old history in the background.
# The newest version of every path is always kept. `rewind mount --keep/--max-size`
# override these for one mount; `rewind gc` applies limits once, by hand.
#
# [retention]
# keep = "30d"      # remove changes older than this (s, m, h, d, w)
# max-size = "2G"   # then remove the oldest until the stored content fits (K, M, G, T)
# every = "1h"      # how often to apply the limits (default 1h)
"#;

/// What `rewind.toml` says, with defaults for what it leaves out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub retention: Retention,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ConfigFile {
    #[serde(default)]
    retention: RetentionFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RetentionFile {
    keep: Option<String>,
    max_size: Option<Size>,
    every: Option<String>,
}

/// A size as text (`"2G"`) or a number of bytes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Size {
    Bytes(u64),
    Text(String),
}

/// What is wrong with a `rewind.toml`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Toml(#[from] toml::de::Error),
    #[error("[retention] {0}")]
    Retention(#[from] crate::history::retention::BadLimit),
}

impl Config {
    /// Read `rewind.toml` in `store_dir`; no file means the defaults. A file that does not
    /// parse is an error naming it and what is wrong, so a typo never goes unnoticed.
    pub fn load(store_dir: &Path) -> crate::history::Result<Config> {
        let path = store_dir.join(FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(source) => return Err(crate::history::Error::Io { path, source }),
        };
        Config::parse(&text).map_err(|source| crate::history::Error::Config { path, source })
    }

    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let file: ConfigFile = toml::from_str(text)?;
        let r = file.retention;
        let max_size = r.max_size.map(|s| match s {
            Size::Bytes(b) => b.to_string(),
            Size::Text(t) => t,
        });
        let retention =
            Retention::parse(r.keep.as_deref(), max_size.as_deref(), r.every.as_deref())?;
        Ok(Config { retention })
    }
}

/// Put a commented `rewind.toml` into a store that has none.
pub fn write_template(store_dir: &Path) {
    let path = store_dir.join(FILE);
    if !path.exists()
        && let Err(e) = std::fs::write(&path, TEMPLATE)
    {
        tracing::warn!("cannot write {}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_template_parses_to_the_defaults() {
        assert_eq!(Config::parse(TEMPLATE).unwrap(), Config::default());
        assert_eq!(Config::parse("").unwrap(), Config::default());
    }

    #[test]
    fn reads_retention() {
        let c = Config::parse("[retention]\nkeep = \"30d\"\nmax-size = 1048576\nevery = \"5m\"\n")
            .unwrap();
        assert_eq!(
            c.retention.describe(),
            "keep 30d, max-size 1048576, applied every 5m"
        );
        let c = Config::parse("[retention]\nmax-size = \"2G\"\n").unwrap();
        assert_eq!(c.retention.max_size, Some(("2G".into(), 2 << 30)));
    }

    #[test]
    fn says_what_is_wrong() {
        let e = Config::parse("[retention]\nkeeep = \"30d\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("keeep"), "{e}");
        let e = Config::parse("[retention]\nkeep = \"a month\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[retention] keep \"a month\""), "{e}");
        let e = Config::parse("[retention\n").unwrap_err().to_string();
        assert!(e.contains("line 1"), "{e}");
    }
}
