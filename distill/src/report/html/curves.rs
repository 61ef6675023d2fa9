//! A student's curves as its `metrics.jsonl` logged them ([`crate::train::metrics`]): the step lines and
//! the epoch lines, read as JSON objects so that every numeric field can be plotted by name.
use std::path::Path;

use serde_json::{Map, Value};

/// The lines of one student's `metrics.jsonl`.
#[derive(Debug, Clone, Default)]
pub struct Curves {
    lines: Vec<Map<String, Value>>,
}

impl Curves {
    /// The lines of the `metrics.jsonl` at `path`; a missing file or a line that is not a JSON
    /// object (a run cut short) gives no points, never an error: the page shows what there is.
    pub fn read(path: &Path) -> Curves {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        Curves::parse(&text)
    }

    /// [`Curves::read`] of the file's text.
    pub fn parse(text: &str) -> Curves {
        let lines = text
            .lines()
            .filter_map(|l| match serde_json::from_str::<Value>(l) {
                Ok(Value::Object(map)) => Some(map),
                _ => None,
            })
            .collect();
        Curves { lines }
    }

    /// `(x, y)` of every line of `kind` (`"step"` or `"epoch"`) that holds both fields as finite
    /// numbers, in the file's order: e.g. `series("step", "step", "loss")`.
    pub fn series(&self, kind: &str, x: &str, y: &str) -> Vec<(f64, f64)> {
        self.lines
            .iter()
            .filter(|l| l.get("kind").and_then(Value::as_str) == Some(kind))
            .filter_map(|l| Some((l.get(x)?.as_f64()?, l.get(y)?.as_f64()?)))
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect()
    }

    /// True when some line of `kind` holds `field` as a number.
    pub fn has(&self, kind: &str, field: &str) -> bool {
        self.lines
            .iter()
            .any(|l| l.get("kind").and_then(Value::as_str) == Some(kind) && l.get(field).is_some_and(Value::is_number))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_take_the_lines_of_their_kind_that_hold_both_numbers() {
        let curves = Curves::parse(
            "{\"kind\":\"step\",\"step\":10,\"loss\":1.5,\"lr\":0.01}\n\
             {\"kind\":\"epoch\",\"epoch\":1,\"step\":10,\"test_accuracy\":0.5,\"agreement\":null}\n\
             not json\n\
             {\"kind\":\"step\",\"step\":20,\"loss\":1.25}\n\
             {\"kind\":\"step\",\"step\":30,\"lo",
        );
        assert_eq!(curves.series("step", "step", "loss"), [(10.0, 1.5), (20.0, 1.25)]);
        assert_eq!(curves.series("step", "step", "lr"), [(10.0, 0.01)]);
        assert_eq!(curves.series("epoch", "epoch", "test_accuracy"), [(1.0, 0.5)]);
        assert!(curves.series("epoch", "epoch", "agreement").is_empty());
        assert!(curves.has("epoch", "test_accuracy") && !curves.has("epoch", "agreement"));
        assert!(Curves::read(Path::new("/nonexistent/metrics.jsonl")).series("step", "step", "loss").is_empty());
    }
}
