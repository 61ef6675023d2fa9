//! Where a chart's one-line label goes so that no line crosses it: the first of a few candidate
//! spots along its row whose box meets none of the chart's marks. Pure, in SVG user units.

/// Width of one character of the charts' text, rounded up, in SVG user units (a chart's CSS
/// font size is in user units: 12 on a phone, 11 on a wide screen): 0.68 em of 12 units, the
/// bold digits of DejaVu Sans, the widest sans-serif that `system-ui` falls back to (on Debian's
/// Chromium; SF Pro and Segoe UI are narrower), so an estimated box holds the drawn one.
pub const CHAR_W: f64 = 8.2;

/// From one baseline of a label to the next, in SVG user units (1.2 lines of 12-unit text).
pub const LINE_H: f64 = 14.0;

/// A line of the chart from one `(x, y)` end to the other.
pub type Segment = ((f64, f64), (f64, f64));

/// A box on the chart: `x0..x1` by `y0..y1` (y grows downwards).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x0: f64,
    pub x1: f64,
    pub y0: f64,
    pub y1: f64,
}

impl Rect {
    /// The box of a line of `chars` characters of text whose baseline starts at `(x, y)`: 11
    /// units above the baseline (a 12-unit font's ascent), 4 below (descenders and the halo).
    pub fn text(x: f64, y: f64, chars: usize) -> Rect {
        Rect::lines(x, y, chars, 1)
    }

    /// The box of `lines` lines of at most `chars` characters, the first baseline at `(x, y)`
    /// and each next one [`LINE_H`] lower.
    pub fn lines(x: f64, y: f64, chars: usize, lines: usize) -> Rect {
        let below = LINE_H * lines.saturating_sub(1) as f64;
        Rect { x0: x, x1: x + chars as f64 * CHAR_W, y0: y - 12.0, y1: y + 4.0 + below }
    }

    /// Whether the segment from `a` to `b` (a line of the chart, 2 units thick) meets this box.
    pub fn meets_segment(&self, a: (f64, f64), b: (f64, f64)) -> bool {
        let grown = Rect { x0: self.x0 - 1.5, x1: self.x1 + 1.5, y0: self.y0 - 1.5, y1: self.y1 + 1.5 };
        // clip the segment to the grown box's x range, then compare its y range there
        let (l, r) = if a.0 <= b.0 { (a, b) } else { (b, a) };
        if r.0 < grown.x0 || l.0 > grown.x1 {
            return false;
        }
        let at = |x: f64| if r.0 == l.0 { None } else { Some(l.1 + (r.1 - l.1) * (x - l.0) / (r.0 - l.0)) };
        let (ya, yb) = match (at(grown.x0.max(l.0)), at(grown.x1.min(r.0))) {
            (Some(ya), Some(yb)) => (ya, yb),
            _ => (l.1, r.1),
        };
        ya.min(yb) <= grown.y1 && ya.max(yb) >= grown.y0
    }

    /// Whether two boxes overlap.
    pub fn meets(&self, other: &Rect) -> bool {
        self.x0 < other.x1 && other.x0 < self.x1 && self.y0 < other.y1 && other.y0 < self.y1
    }
}

/// The start `x` of a label of `lines` lines of at most `chars` characters, its first baseline
/// at `y` (see [`Rect::lines`]), within `x_min..x_max`:
/// the first of `preferred` (left edges to try, in order; a label starting there must end by
/// `x_max`), then of the spots just right of each segment and box, then of those ending just left
/// of each, whose box meets none of `segments` and none of `boxes`. `None` when no spot is clear.
pub fn clear_spot(
    (chars, lines): (usize, usize),
    y: f64,
    (x_min, x_max): (f64, f64),
    preferred: &[f64],
    segments: &[Segment],
    boxes: &[Rect],
) -> Option<f64> {
    let width = chars as f64 * CHAR_W;
    let after_marks = segments.iter().map(|(a, b)| a.0.max(b.0) + 4.0);
    let after_boxes = boxes.iter().map(|r| r.x1 + 4.0);
    let before_marks = segments.iter().map(move |(a, b)| a.0.min(b.0) - 4.0 - width);
    let before_boxes = boxes.iter().map(move |r| r.x0 - 4.0 - width);
    preferred.iter().copied().chain(after_marks).chain(after_boxes).chain(before_marks).chain(before_boxes).find(|&x| {
        let r = Rect::lines(x, y, chars, lines);
        r.x0 >= x_min
            && r.x1 <= x_max
            && !segments.iter().any(|&(a, b)| r.meets_segment(a, b))
            && !boxes.iter().any(|b| r.meets(b))
    })
}

/// Every how many doublings an axis of powers of two labels its ticks so that no two labels
/// touch: the smallest power of two `k` (1, 2, 4...) with `k` doublings at least as wide as the
/// widest label (`chars` characters of [`CHAR_W`]) and a gap of [`TICK_GAP`]; `per_doubling` is
/// the axis's width of one doubling, in SVG user units. A label is centred on its tick, so two
/// neighbours are `k x per_doubling` apart centre to centre.
pub fn tick_stride(per_doubling: f64, chars: usize) -> u32 {
    let room = chars as f64 * CHAR_W + TICK_GAP;
    let mut k = 1u32;
    while (k as f64) * per_doubling < room && k < 64 {
        k *= 2;
    }
    k
}

/// The least room between two tick labels, in SVG user units.
pub const TICK_GAP: f64 = 6.0;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_box_spans_its_characters() {
        assert_eq!(Rect::text(10.0, 50.0, 10), Rect { x0: 10.0, x1: 92.0, y0: 38.0, y1: 54.0 });
        // two lines: the second baseline 14 lower
        assert_eq!(Rect::lines(10.0, 50.0, 10, 2), Rect { x0: 10.0, x1: 92.0, y0: 38.0, y1: 68.0 });
    }

    #[test]
    fn segments_meet_a_box_only_where_they_pass_through_it() {
        let r = Rect { x0: 100.0, x1: 200.0, y0: 40.0, y1: 55.0 };
        assert!(r.meets_segment((150.0, 0.0), (150.0, 300.0)), "a vertical line through it");
        assert!(!r.meets_segment((210.0, 0.0), (210.0, 300.0)), "a vertical line right of it");
        assert!(r.meets_segment((0.0, 100.0), (300.0, 0.0)), "a diagonal through it (y 66.7 to 33.3 there)");
        assert!(!r.meets_segment((0.0, 300.0), (300.0, 100.0)), "a diagonal below it (y 233 to 200 there)");
        assert!(r.meets_segment((0.0, 56.0), (300.0, 56.0)), "a line 1 unit below touches it");
        assert!(!r.meets_segment((0.0, 60.0), (300.0, 60.0)), "a line 5 units below clears it");
    }

    #[test]
    fn the_label_moves_off_a_line_that_crosses_its_first_spot() {
        // 20 characters (164 units) at the right end of a 640-unit chart, a vertical mark at 560
        let mark = ((560.0, 16.0), (560.0, 224.0));
        let right = 640.0 - 4.0 - 20.0 * CHAR_W;
        assert_eq!(clear_spot((20, 1), 100.0, (64.0, 640.0), &[right, 68.0], &[], &[]), Some(right));
        assert_eq!(clear_spot((20, 1), 100.0, (64.0, 640.0), &[right, 68.0], &[mark], &[]), Some(68.0));
        // the left spot blocked too (a mark at 100): just right of that mark
        let left = ((100.0, 16.0), (100.0, 224.0));
        assert_eq!(clear_spot((20, 1), 100.0, (64.0, 640.0), &[right, 68.0], &[mark, left], &[]), Some(104.0));
        // a box in the way counts as a mark
        let label = Rect::text(66.0, 100.0, 5);
        assert_eq!(clear_spot((20, 1), 100.0, (64.0, 640.0), &[68.0], &[], &[label]), Some(label.x1 + 4.0));
        // clear only ending just left of a mark: a diagonal blocks the left of the row and ends
        // too far right for a label after it, the mark at 480 leaves no room after it
        let diagonal = ((100.0, 90.0), (400.0, 400.0));
        let late = ((480.0, 16.0), (480.0, 224.0));
        assert_eq!(
            clear_spot((20, 1), 100.0, (64.0, 500.0), &[68.0], &[diagonal, late], &[]),
            Some(480.0 - 4.0 - 20.0 * CHAR_W)
        );
        // a two-line label meets a line its first line would clear: a mark from y 110 down
        let low = ((300.0, 110.0), (300.0, 224.0));
        assert_eq!(clear_spot((20, 1), 100.0, (200.0, 640.0), &[200.0], &[low], &[]), Some(200.0));
        assert_eq!(clear_spot((20, 2), 100.0, (200.0, 640.0), &[200.0], &[low], &[]), Some(304.0));
        // nowhere clear
        let wall: Vec<_> = (0..20).map(|i| ((64.0 + 30.0 * i as f64, 0.0), (64.0 + 30.0 * i as f64, 300.0))).collect();
        assert_eq!(clear_spot((20, 1), 100.0, (64.0, 640.0), &[68.0], &wall, &[]), None);
    }

    #[test]
    fn ticks_thin_out_until_their_labels_have_room() {
        // 18 doublings (1 to 262,144) on 550 units: 30.6 units apart; "262144" needs
        // 6 x 8.2 + 6 = 55.2 units, so every 2nd doubling (61.1 units)
        assert_eq!(tick_stride(550.0 / 18.0, 6), 2);
        // 8 doublings on the same width: 70.5 units, every one has room
        assert_eq!(tick_stride(564.0 / 8.0, 3), 1);
        // 15 units a doubling, 7-digit labels (63.4 units with the gap): 4 doublings are
        // 60 units, short, so every 8th
        assert_eq!(tick_stride(15.0, 7), 8);
    }
}
