//! Line charts of a run's curves (loss, held-out figures, learning rate, throughput), drawn by
//! plotters' SVG backend: a line per series and a dot per point, each dot carrying its series,
//! `x` and `y` as `data-*` attributes and a `<title>` ([`super::markup::annotate`]).
use plotters::prelude::*;

use super::markup::{annotate, escape, exact, Mark};

/// Size of a chart, pixels.
pub const WIDTH: u32 = 760;
pub const HEIGHT: u32 = 300;

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// The legend's name, also each point's `data-series`.
    pub name: String,
    pub colour: RGBColor,
    /// `(x, y)` in drawing order; non-finite points are left out.
    pub points: Vec<(f64, f64)>,
}

/// A chart of several series against one `x`.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// The figure's `id` in the page.
    pub id: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
}

impl LineChart {
    /// The chart as an SVG element followed by its HTML legend; a chart whose series hold no
    /// point is a one-line note.
    pub fn html(&self) -> String {
        let series: Vec<Series> = self
            .series
            .iter()
            .map(|s| Series {
                points: s.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect(),
                ..s.clone()
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if series.is_empty() {
            return format!("<p class=\"note\" id=\"{}\">nothing logged</p>", escape(&self.id));
        }
        let svg = match draw(self, &series) {
            Ok(svg) => svg,
            Err(e) => {
                return format!("<p class=\"note\" id=\"{}\">the plot failed: {}</p>", escape(&self.id), escape(&e))
            }
        };
        let marks: Vec<Mark> = series
            .iter()
            .flat_map(|s| {
                s.points.iter().map(|&(x, y)| Mark {
                    data: vec![("series", s.name.clone()), ("x", exact(x)), ("y", exact(y))],
                    title: format!("{}: {} {}, {} {}", s.name, self.x_label, exact(x), self.y_label, exact(y)),
                })
            })
            .collect();
        let legend: String = series
            .iter()
            .map(|s| {
                let RGBColor(r, g, b) = s.colour;
                format!("<span><i style=\"background:rgb({r},{g},{b})\"></i>{}</span>", escape(&s.name))
            })
            .collect();
        format!(
            "<figure class=\"chart\" id=\"{}\">{}<figcaption>{legend}</figcaption></figure>",
            escape(&self.id),
            annotate(&svg, "circle", &marks)
        )
    }
}

/// `[lo, hi]` of `values`, widened by 5% (a single value by 1, or 10% of itself) so that no
/// point sits on the frame.
pub fn padded_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if hi > lo {
        let pad = 0.05 * (hi - lo);
        (lo - pad, hi + pad)
    } else {
        let pad = if lo == 0.0 { 1.0 } else { 0.1 * lo.abs() };
        (lo - pad, hi + pad)
    }
}

/// The SVG text of `chart`'s finite `series`: lines first, then the dots (so that the dots are
/// the chart's last circles).
fn draw(chart: &LineChart, series: &[Series]) -> Result<String, String> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let (x0, x1) = padded_range(points().map(|p| p.0));
    let (y0, y1) = padded_range(points().map(|p| p.1));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        let mut c = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| e.to_string())?;
        c.configure_mesh()
            .x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .label_style(("sans-serif", 12))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| e.to_string())?;
        for s in series {
            let style = ShapeStyle { color: s.colour.to_rgba(), filled: false, stroke_width: 2 };
            c.draw_series(LineSeries::new(s.points.iter().copied(), style)).map_err(|e| e.to_string())?;
        }
        for s in series {
            c.draw_series(s.points.iter().map(|&p| Circle::new(p, 3, s.colour.filled()))).map_err(|e| e.to_string())?;
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_is_a_dot_carrying_its_value() {
        let chart = LineChart {
            id: "loss".into(),
            x_label: "step".into(),
            y_label: "loss".into(),
            series: vec![
                Series {
                    name: "student loss".into(),
                    colour: RGBColor(0, 0, 255),
                    points: vec![(10.0, 2.5), (20.0, 1.25)],
                },
                Series { name: "empty".into(), colour: RGBColor(0, 0, 0), points: vec![(1.0, f64::NAN)] },
                Series { name: "student ce".into(), colour: RGBColor(255, 0, 0), points: vec![(10.0, 0.75)] },
            ],
        };
        let html = chart.html();
        assert_eq!(html.matches("<circle ").count(), 3, "{html}");
        assert_eq!(html.matches("class=\"mark\"").count(), 3, "{html}");
        assert!(html.contains("data-series=\"student loss\" data-x=\"20\" data-y=\"1.25\""), "{html}");
        assert!(html.contains("<title>student ce: step 10, loss 0.75</title>"), "{html}");
        // the legend names the series that have points
        assert!(html.contains("student ce</span>") && !html.contains("empty"), "{html}");
        let none = LineChart { series: vec![], ..chart };
        assert_eq!(none.html(), "<p class=\"note\" id=\"loss\">nothing logged</p>");
        assert_eq!(padded_range([1.0, 3.0].into_iter()), (0.9, 3.1));
        assert_eq!(padded_range([2.0].into_iter()), (1.8, 2.2));
        assert_eq!(padded_range([0.0].into_iter()), (-1.0, 1.0));
    }
}
