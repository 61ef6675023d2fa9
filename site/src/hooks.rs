//! The page's effects and memoised computations, one hook per file under `src/hooks/`.
pub mod use_first_numbers;
pub mod use_sweep;
pub mod use_url_sync;

pub use use_first_numbers::use_first_numbers;
pub use use_sweep::{use_sweep, FormPricing};
pub use use_url_sync::{linked_fragment, use_url_sync};
