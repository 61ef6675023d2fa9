//! Test-only: one `report.json` memory section that the tests of both its printed forms start
//! from (the summary's line, `summary.rs`; the report page's table, `html/tables.rs`).
use crate::report::MemoryReport;

/// A CUDA run at micro-batch 64 on an 80 GiB device: the plan's 1.5 GiB in all, 1.0 GiB
/// allocated and 1.25 GiB reserved (the allocator's replay); measured, 1.25 GiB allocated and
/// 512 MiB reserved; no resident set and no breakdown (a test sets what it looks at).
pub(crate) fn cuda_run() -> MemoryReport {
    MemoryReport {
        device: "cuda:0".into(),
        capacity_bytes: 80 << 30,
        batch: 64,
        predicted_total_bytes: 3 << 29,
        predicted_allocated_bytes: 1 << 30,
        predicted_reserved_bytes: 5 << 28,
        measured_peak_allocated_bytes: Some(5 << 28),
        measured_peak_reserved_bytes: Some(1 << 29),
        measured_peak_resident_bytes: None,
        predicted_breakdown: Vec::new(),
    }
}
