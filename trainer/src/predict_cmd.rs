//! `shardplan-train predict`: a profile's prices for the sets of a request file (`trainer::calibrate::predict`).

use std::path::PathBuf;

use anyhow::Result;

/// Arguments of `shardplan-train predict`.
#[derive(clap::Args)]
pub struct PredictArgs {
    /// Profile directory.
    #[arg(long)]
    pub profile: PathBuf,
    /// Set requests.
    #[arg(long)]
    pub requests: PathBuf,
    /// The measured dataset of the same requests (optional).
    #[arg(long)]
    pub measured: Option<PathBuf>,
}

/// `shardplan-train predict`: one CSV line per set.
pub fn run(a: &PredictArgs) -> Result<()> {
    print!("{}", trainer::calibrate::predict(&a.profile, &a.requests, a.measured.as_deref())?);
    Ok(())
}
