//! What the subcommands share: the `--tables` range of the policy trainers and the command line a
//! card records.

/// Parses `--tables`: `N` or `lo..hi` (hi excluded), 1 <= lo < hi.
pub fn parse_tables(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("`--tables` = {text} is invalid: a count N >= 1 or a range lo..hi with 1 <= lo < hi");
    let range = if let Some((lo, hi)) = text.split_once("..") {
        (lo.trim().parse::<usize>().map_err(|_| bad())?, hi.trim().parse::<usize>().map_err(|_| bad())?)
    } else {
        let n = text.trim().parse::<usize>().map_err(|_| bad())?;
        (n, n.saturating_add(1))
    };
    if range.0 == 0 || range.1 <= range.0 {
        return Err(bad());
    }
    Ok(range)
}

/// The command line as typed, recorded in cards for provenance.
pub fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}
