//! The one error type of planner-core.

use crate::units::format_bytes_exact;

/// Everything planner-core can refuse, each variant naming what the caller can act on.
///
/// Messages name the field, the offending value and what is allowed, so a CLI or a browser can show
/// them as they are.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A field of an input record holds a value outside its allowed range.
    #[error("{context}: field `{field}` = {value} is invalid: {allowed}")]
    InvalidField {
        /// Where the record came from (e.g. "table 3 (`t17`)", "devices").
        context: String,
        /// The field's name as the user wrote it.
        field: String,
        /// The rejected value, as text.
        value: String,
        /// What would have been accepted.
        allowed: String,
    },
    /// An input file could not be parsed at all.
    #[error("{context}: {message}")]
    Parse {
        /// Which input (e.g. "tables CSV line 4").
        context: String,
        /// The parser's message.
        message: String,
    },
    /// A piece of a table fits on no device, so no valid plan exists for this planner.
    #[error(
        "table `{table}` (a piece of {}) fits on no device: the most free memory left on one is {}",
        format_bytes_exact(*.need_bytes),
        format_bytes_exact(*.best_free_bytes)
    )]
    NoFit {
        /// The table's name.
        table: String,
        /// Bytes the piece needs.
        need_bytes: u64,
        /// The most free memory left on any device when it was placed.
        best_free_bytes: u64,
    },
    /// A planner found no plan that fits (e.g. TorchRec's planner after trying all its proposals).
    #[error("planner `{planner}` found no plan: {reason}")]
    NoPlan {
        /// The planner's name.
        planner: String,
        /// Why, with the numbers that decided it.
        reason: String,
    },
    /// A plan does not describe the task it claims to plan.
    #[error("invalid plan: {0}")]
    InvalidPlan(String),
    /// No planner with this name is registered.
    #[error("unknown planner `{name}`; known planners: {known}")]
    UnknownPlanner {
        /// The requested name.
        name: String,
        /// Comma-separated registered names.
        known: String,
    },
    /// No cost model with this name is known.
    #[error("unknown cost model `{name}`; known cost models: {known}")]
    UnknownCostModel {
        /// The requested name.
        name: String,
        /// Comma-separated known names.
        known: String,
    },
    /// A cost model could not produce a cost (bad output shape, non-finite value, failed inference).
    #[error("cost model `{model}`: {message}")]
    CostModel {
        /// The model's name.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// A trained model does not match what this build computes (schema, features, shapes).
    #[error("model `{model}` does not match this build: {what}: expected {expected}, found {found}")]
    ModelSchemaMismatch {
        /// The model's name.
        model: String,
        /// What differs.
        what: String,
        /// What this build needs.
        expected: String,
        /// What the model has.
        found: String,
    },
    /// A memory rule reserves more of a device than its cap, before any table is placed.
    #[error(
        "device {device}: the `{rule}` memory rule reserves {} ({why}), more than its cap of {}",
        format_bytes_exact(*.reserved_bytes),
        format_bytes_exact(*.cap_bytes)
    )]
    ReservationExceedsCap {
        /// The device.
        device: usize,
        /// The rule's name.
        rule: String,
        /// Bytes the rule reserves on it.
        reserved_bytes: u64,
        /// Its memory cap.
        cap_bytes: u64,
        /// What the reservation is made of.
        why: String,
    },
    /// A byte count does not fit in 64 bits (far beyond any device; the input is not a real workload).
    #[error("{context}: {value_bytes} bytes is more than 64 bits can count (at most 18446744073709551615)")]
    ByteOverflow {
        /// What was being counted.
        context: String,
        /// The count, as exact as it could be computed.
        value_bytes: String,
    },
    /// The tables kept in host memory (cached) need more host DRAM than the task's hosts have together
    /// ([`crate::memory::check_capacity`]).
    #[error(
        "the tables kept in host memory need {need} of host DRAM, but {} {have} in total; give the hosts more DRAM (--host-dram) or keep fewer tables there",
        counted(*.hosts, "host has", "hosts have")
    )]
    HostMemoryTooSmall {
        /// Their weights and optimizer state in host memory, formatted.
        need: String,
        /// How many hosts.
        hosts: usize,
        /// Their DRAM together, formatted.
        have: String,
    },
    /// The task's tables cannot fit on its devices under any plan: their weights and optimizer state
    /// alone exceed the devices' usable memory together ([`crate::memory::check_capacity`]).
    #[error(
        "{} at least {need} of weights and optimizer state, but {} {usable} usable in total{hint}",
        counted(*.tables, "table needs", "tables need"),
        counted(*.devices, "device has", "devices have")
    )]
    TaskTooLarge {
        /// How many tables.
        tables: usize,
        /// Their weights and optimizer state, formatted.
        need: String,
        /// How many devices.
        devices: usize,
        /// Their usable memory together (and the reservation, when the rule makes one), formatted.
        usable: String,
        /// What would be enough, starting with "; ", or empty.
        hint: String,
    },
    /// A task sampler could not produce a task under its constraints.
    #[error("task sampling failed: {0}")]
    Sampling(String),
}

/// "the 1 table needs" / "the 856 tables need".
fn counted(n: usize, one: &str, many: &str) -> String {
    format!("the {n} {}", if n == 1 { one } else { many })
}

impl Error {
    /// Shorthand for [`Error::InvalidField`].
    pub fn field(
        context: impl Into<String>,
        field: impl Into<String>,
        value: impl std::fmt::Display,
        allowed: impl Into<String>,
    ) -> Self {
        Self::InvalidField {
            context: context.into(),
            field: field.into(),
            value: value.to_string(),
            allowed: allowed.into(),
        }
    }
}

/// Result alias of planner-core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
