//! Horizontal bar charts (the memory plan beside the measured peaks, the wall time by phase,
//! sparsity per layer), drawn by plotters' SVG backend: a bar per row, top to bottom in the
//! rows' order, each carrying its label and exact value as `data-*` attributes and a `<title>`.
use plotters::prelude::*;

use super::markup::{annotate, escape, exact, Mark};

/// One bar.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    /// The figure itself (bytes, seconds, a share), the bar's `data-value`.
    pub value: f64,
    /// Its length in the axis's unit (e.g. `value` in MiB).
    pub length: f64,
    /// The figure as the `<title>` says it, e.g. `1.5 GiB`.
    pub text: String,
    pub colour: RGBColor,
}

/// Bars against one axis.
#[derive(Debug, Clone)]
pub struct BarChart {
    pub id: String,
    /// The axis's name and unit, e.g. `MiB`.
    pub axis: String,
    pub bars: Vec<Bar>,
}

impl BarChart {
    /// The chart as an SVG element in a figure; no bars: a one-line note.
    pub fn html(&self) -> String {
        if self.bars.is_empty() {
            return format!("<p class=\"note\" id=\"{}\">nothing measured</p>", escape(&self.id));
        }
        let svg = match draw(self) {
            Ok(svg) => svg,
            Err(e) => {
                return format!("<p class=\"note\" id=\"{}\">the plot failed: {}</p>", escape(&self.id), escape(&e))
            }
        };
        let marks: Vec<Mark> = self
            .bars
            .iter()
            .map(|b| Mark {
                data: vec![("label", b.label.clone()), ("value", exact(b.value))],
                title: format!("{}: {}", b.label, b.text),
            })
            .collect();
        format!("<figure class=\"chart\" id=\"{}\">{}</figure>", escape(&self.id), annotate(&svg, "rect", &marks))
    }
}

/// The SVG text of `chart`: the axis, then the bars (so that the bars are its last rectangles).
fn draw(chart: &BarChart) -> Result<String, String> {
    let n = chart.bars.len() as i32;
    let longest = chart.bars.iter().map(|b| b.length).fold(0.0f64, f64::max);
    let end = if longest > 0.0 && longest.is_finite() { 1.05 * longest } else { 1.0 };
    let height = 60 + 26 * chart.bars.len() as u32;
    let label_width = chart.bars.iter().map(|b| b.label.chars().count()).max().unwrap_or(0) as u32 * 7 + 16;
    let labels: Vec<&str> = chart.bars.iter().map(|b| b.label.as_str()).collect();
    // bar k of the list sits at row n - 1 - k: the first at the top
    let label_of = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(row) if (0..n).contains(row) => labels[(n - 1 - row) as usize].to_string(),
        _ => String::new(),
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (super::chart::WIDTH, height)).into_drawing_area();
        let mut c = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(label_width.clamp(60, 300))
            .build_cartesian_2d(0.0..end, (0..n).into_segmented())
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .disable_y_mesh()
            .x_desc(chart.axis.as_str())
            .y_labels(chart.bars.len())
            .y_label_formatter(&label_of)
            .label_style(("sans-serif", 12))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| e.to_string())?;
        let rects = chart.bars.iter().enumerate().map(|(k, b)| {
            let row = n - 1 - k as i32;
            let length = if b.length.is_finite() { b.length.max(0.0) } else { 0.0 };
            let mut r = Rectangle::new(
                [(0.0, SegmentValue::Exact(row)), (length, SegmentValue::Exact(row + 1))],
                b.colour.filled(),
            );
            r.set_margin(4, 4, 0, 0);
            r
        });
        c.draw_series(rects).map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bar_carries_its_label_and_value_top_to_bottom() {
        let bar = |label: &str, value: f64| Bar {
            label: label.into(),
            value,
            length: value / 2.0,
            text: format!("{value} s"),
            colour: RGBColor(0, 0, 255),
        };
        let chart = BarChart {
            id: "phases".into(),
            axis: "seconds".into(),
            bars: vec![bar("startup", 0.5), bar("training", 4.0)],
        };
        let html = chart.html();
        assert_eq!(html.matches("<rect ").count(), 2, "{html}");
        let first = html.find("data-label=\"startup\" data-value=\"0.5\"").expect(&html);
        let second = html.find("data-label=\"training\" data-value=\"4\"").expect(&html);
        assert!(first < second, "drawing order");
        assert!(html.contains("<title>training: 4 s</title>"), "{html}");
        // the first bar is the top one: its rectangle's y is the smaller
        let y = |at: usize| -> i64 {
            let rest = &html[at..];
            let v = &rest[rest.find(" y=\"").unwrap() + 4..];
            v[..v.find('"').unwrap()].parse().unwrap()
        };
        assert!(y(first) < y(second), "{html}");
        assert_eq!(BarChart { bars: vec![], ..chart }.html(), "<p class=\"note\" id=\"phases\">nothing measured</p>");
    }
}
