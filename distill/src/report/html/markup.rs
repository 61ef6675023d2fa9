//! Markup helpers of `report.html`: escaping text for HTML and SVG, the exact text of a value,
//! and the values put on the SVG shapes plotters draws ([`annotate`]).

/// `text` with `& < > " '` escaped, for an element's text or an attribute's value.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `v` as the shortest text that reads back as the same `f64` (Rust's `Display`), e.g. `10`,
/// `0.25`, `1.2345678901234567`.
pub fn exact(v: f64) -> String {
    format!("{v}")
}

/// What one drawn shape carries: `data-*` attributes (name without the prefix, value) and the
/// `<title>` a browser shows on hovering it.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    pub data: Vec<(&'static str, String)>,
    pub title: String,
}

/// `svg` (plotters' SVG text) with the last `marks.len()` `<tag .../>` elements, in drawing order,
/// carrying `class="mark"`, each mark's `data-*` attributes and its `<title>`. Plotters draws the
/// axes and the mesh as lines and text, so a chart's circles (or bars) are exactly the shapes
/// drawn for its points; when there are fewer than marks, `svg` comes back unmarked.
pub fn annotate(svg: &str, tag: &str, marks: &[Mark]) -> String {
    let open = format!("<{tag} ");
    let starts: Vec<usize> = svg.match_indices(&open).map(|(i, _)| i).collect();
    if starts.len() < marks.len() {
        return svg.to_string();
    }
    let first = starts.len() - marks.len();
    let mut out = String::with_capacity(svg.len() + marks.len() * 96);
    let mut from = 0;
    for (start, mark) in starts[first..].iter().zip(marks) {
        let Some(end) = svg[*start..].find("/>").map(|e| start + e) else { return svg.to_string() };
        out.push_str(&svg[from..*start]);
        out.push_str(&open);
        out.push_str("class=\"mark\" ");
        for (name, value) in &mark.data {
            out.push_str(&format!("data-{name}=\"{}\" ", escape(value)));
        }
        out.push_str(&svg[*start + open.len()..end]);
        out.push_str(&format!("><title>{}</title></{tag}>", escape(&mark.title)));
        from = end + 2;
    }
    out.push_str(&svg[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_shapes_carry_their_marks_in_drawing_order() {
        let svg = "<svg>\n<circle cx=\"1\" r=\"2\"/>\n<circle cx=\"3\" r=\"2\"/>\n<circle cx=\"5\" r=\"2\"/>\n</svg>\n";
        let mark = |y: &str| Mark { data: vec![("series", "a<b".into()), ("y", y.into())], title: format!("y {y}") };
        let marked = annotate(svg, "circle", &[mark("0.5"), mark("1e-7")]);
        assert_eq!(
            marked,
            "<svg>\n<circle cx=\"1\" r=\"2\"/>\n\
             <circle class=\"mark\" data-series=\"a&lt;b\" data-y=\"0.5\" cx=\"3\" r=\"2\"><title>y 0.5</title></circle>\n\
             <circle class=\"mark\" data-series=\"a&lt;b\" data-y=\"1e-7\" cx=\"5\" r=\"2\"><title>y 1e-7</title></circle>\n\
             </svg>\n"
        );
        // more marks than shapes: nothing is marked wrongly
        assert_eq!(annotate(svg, "rect", &[mark("1")]), svg);
        assert_eq!(escape("a & 'b' <c>"), "a &amp; &#39;b&#39; &lt;c&gt;");
        assert_eq!(
            (exact(10.0), exact(0.1 + 0.2), exact(1e-7)),
            ("10".into(), "0.30000000000000004".into(), "0.0000001".into())
        );
    }
}
