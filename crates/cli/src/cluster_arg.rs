//! Which cluster a client-side command talks to: `--config FILE`, else the file named by
//! `$MEGASTORE_CONFIG`, else a `megastore dev` cluster on its default ports.

use std::path::PathBuf;

use clap::Args;
use megastore_config::ClusterConfig;

/// The default topology (docs/architecture.md, "Default topology"), as `megastore dev` runs it (data directories
/// relative to its data directory).
pub(crate) const DEV_TOPOLOGY: &str = include_str!("../../config/cluster.example.toml");

/// The cluster a command talks to.
#[derive(Debug, Args)]
pub(crate) struct ClusterArg {
    /// The cluster description (default: $MEGASTORE_CONFIG, else a `megastore dev`
    /// cluster on its default ports).
    #[arg(long, value_name = "FILE", env = "MEGASTORE_CONFIG")]
    pub(crate) config: Option<PathBuf>,
}

impl ClusterArg {
    /// The cluster's description.
    pub(crate) fn load(&self) -> anyhow::Result<ClusterConfig> {
        Ok(match &self.config {
            Some(path) => ClusterConfig::load(path)?,
            None => ClusterConfig::parse(DEV_TOPOLOGY, "the default `megastore dev` topology")?,
        })
    }

    /// How to name this cluster to the user in a command line (`--config FILE`, or
    /// nothing for the default).
    pub(crate) fn flag(&self) -> String {
        self.config
            .as_ref()
            .map(|p| format!(" --config {}", p.display()))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_cluster_is_the_dev_topology() {
        let config = ClusterArg { config: None }.load().unwrap();
        assert_eq!(config.cluster.name, "dev");
        assert_eq!(config.replicas.len(), 4);
        assert_eq!(config.lockd.len(), 3);
        assert_eq!(ClusterArg { config: None }.flag(), "");
    }

    #[test]
    fn a_missing_config_file_is_named_in_the_error() {
        let arg = ClusterArg {
            config: Some(PathBuf::from("/nonexistent/cluster.toml")),
        };
        let error = format!("{:#}", arg.load().unwrap_err());
        assert!(error.contains("/nonexistent/cluster.toml"), "{error}");
    }
}
