//! Figures of a run, as SVG or PNG: one panel per algorithm (and key), with admitted and
//! rejected requests over time, the admitted count over a sliding window, and the limit; or,
//! for an access-log run, one panel per policy with admitted and denied requests over time.
//!
//! Text is laid out with DejaVu Sans compiled into the binary (plotters' `ab_glyph` font
//! support), so a PNG has readable labels on a machine with no fonts installed; an SVG names
//! the font family and leaves the drawing of the letters to its viewer.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use sluice_core::{NANOS_PER_SEC, Nanos, Policy, format_duration};
use thiserror::Error;

use crate::log_time::format_rfc3339;
use crate::simulation::{LaneResults, RunResults};
use crate::timeline::Timeline;
use crate::window::sliding_envelope;

const FONT: &str = "sans-serif";
const WIDTH: u32 = 1200;
const PANEL_HEIGHT: u32 = 300;
const TITLE_HEIGHT: u32 = 50;
/// The most bars a panel draws; longer runs group several windows per bar.
const MAX_BARS: u64 = 150;
/// Horizontal resolution of the sliding-window line.
const LINE_CELLS: usize = 1000;
/// Width of the legend column to the right of each panel.
const LEGEND_WIDTH: u32 = 250;

const ADMITTED: RGBColor = RGBColor(46, 139, 87);
const REJECTED: RGBColor = RGBColor(214, 39, 40);
const SLIDING: RGBColor = RGBColor(31, 119, 180);

/// Why a figure could not be drawn.
#[derive(Debug, Error)]
pub enum PlotError {
    /// The file name does not end in `.svg` or `.png`.
    #[error("plot file `{0}` must end in .svg or .png")]
    Format(String),
    /// The run has no lane to draw.
    #[error("nothing to plot")]
    Empty,
    /// The embedded font could not be loaded.
    #[error("the embedded font could not be loaded")]
    Font,
    /// Drawing or writing the file failed.
    #[error("drawing `{path}`: {message}")]
    Draw {
        /// The file being drawn.
        path: String,
        /// The backend's message.
        message: String,
    },
}

/// Draws `results` into `path` (`.svg` or `.png`, chosen by the extension). `title` heads the
/// figure; `duration` is the length of the time axis.
pub fn plot(path: &Path, results: &RunResults, title: &str, duration: Nanos) -> Result<(), PlotError> {
    is_svg(path)?;
    let scopes: std::collections::HashSet<_> = results.lanes.iter().map(|l| l.lane.scope).collect();
    let show_scope = scopes.len() > 1;
    let panels: Vec<Panel> = results.lanes.iter().map(|lane| lane_panel(lane, results, duration, show_scope)).collect();
    render(path, title, &panels)
}

/// Draws a [`Timeline`] into `path` (`.svg` or `.png`): one panel per series, admitted and
/// denied over time (an access-log run draws one per policy).
pub fn plot_timeline(path: &Path, timeline: &Timeline, title: &str) -> Result<(), PlotError> {
    is_svg(path)?;
    let bins = timeline.len();
    if bins == 0 {
        return Err(PlotError::Empty);
    }
    let per_bar = bar_bins(timeline.bin(), bins);
    let bin = timeline.bin().saturating_mul(per_bar as u64);
    let bars = bins.div_ceil(per_bar);
    let group = |v: &[u64]| -> Vec<u64> { (0..bars).map(|b| v.iter().skip(b * per_bar).take(per_bar).sum()).collect() };
    let panels = timeline
        .series()
        .iter()
        .map(|s| {
            let (admitted, denied) = (group(&s.admitted), group(&s.denied));
            let (a, d): (u64, u64) = (admitted.iter().sum(), denied.iter().sum());
            let share = if a + d == 0 { 0.0 } else { d as f64 * 100.0 / (a + d) as f64 };
            Panel {
                caption: format!("{}: {a} admitted, {d} denied ({share:.2}% denied)", s.name),
                bin,
                admitted,
                rejected: denied,
                span: bin.saturating_mul(bars as u64),
                x_desc: format!("time since {}", format_rfc3339(timeline.origin())),
                bar_label: format!("per {}", format_duration(bin)),
                rejected_word: "denied",
                line: None,
                limit: None,
            }
        })
        .collect::<Vec<_>>();
    render(path, title, &panels)
}

/// How many bins of length `bin` one bar groups so that `bins` of them make at most
/// [`MAX_BARS`] bars, each of a round length (5s, 1m, 15m, 1h, ...) when one fits.
fn bar_bins(bin: Nanos, bins: usize) -> usize {
    const ROUND: [u64; 20] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1_800, 3_600, 7_200, 10_800, 21_600, 43_200, 86_400, 172_800,
        604_800,
    ];
    let least = bins.div_ceil(MAX_BARS as usize).max(1);
    ROUND
        .iter()
        .map(|s| s * NANOS_PER_SEC)
        .filter(|&len| bin > 0 && len % bin == 0)
        .map(|len| (len / bin) as usize)
        .find(|&n| n >= least)
        .unwrap_or(least)
}

/// Checks that `path` names a figure [`plot`] can draw, before a long run: true for `.svg`,
/// false for `.png`, an error otherwise.
pub fn is_svg(path: &Path) -> Result<bool, PlotError> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => Ok(true),
        Some("png") => Ok(false),
        _ => Err(PlotError::Format(path.display().to_string())),
    }
}

fn register_font() -> Result<(), PlotError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED
        .get_or_init(|| plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok());
    if ok { Ok(()) } else { Err(PlotError::Font) }
}

/// One panel of a figure: bars of admitted and rejected requests per bin over `[0, span)`,
/// and, optionally, a stepped line and a dashed limit.
struct Panel {
    /// The caption above the chart.
    caption: String,
    /// The length of one bar.
    bin: Nanos,
    /// Admitted per bar.
    admitted: Vec<u64>,
    /// Rejected (denied) per bar.
    rejected: Vec<u64>,
    /// The length of the time axis.
    span: Nanos,
    /// What the time axis counts from (`time`, `time since 2000-10-10T20:55:36Z`).
    x_desc: String,
    /// How the legend names a bar's length (`per 1s`).
    bar_label: String,
    /// `rejected` or `denied`.
    rejected_word: &'static str,
    /// Values per equal cell of `[0, span)` and the line's legend.
    line: Option<(Vec<u64>, String)>,
    /// The level of the dashed line and its legend.
    limit: Option<(f64, String)>,
}

/// The panel of one lane of a run: bars per window, the admitted count over a sliding window,
/// and the rate the lane's policy allows per window.
fn lane_panel(lane: &LaneResults, results: &RunResults, duration: Nanos, show_scope: bool) -> Panel {
    let window = results.window;
    let span = duration.max(results.times.last().map_or(0, |t| t + 1)).max(1);
    let w = format_duration(window);
    // Bars: admitted and rejected per bin of whole windows.
    let per_bar = span.div_ceil(window).div_ceil(MAX_BARS).max(1);
    let bin = window.saturating_mul(per_bar);
    let bins = span.div_ceil(bin) as usize;
    let mut admitted = vec![0u64; bins];
    let mut rejected = vec![0u64; bins];
    for (&t, &ok) in results.times.iter().zip(&lane.allowed) {
        let b = ((t / bin) as usize).min(bins - 1);
        if ok { admitted[b] += 1 } else { rejected[b] += 1 }
    }
    let admitted_times: Vec<Nanos> =
        results.times.iter().zip(&lane.allowed).filter(|(_, ok)| **ok).map(|(t, _)| *t).collect();
    let envelope = sliding_envelope(&admitted_times, window, span, LINE_CELLS.min(span as usize));
    let limit = rate_line(&lane.lane.policy, window);
    let limit_label = match lane.lane.policy {
        Policy::TokenBucket(_) | Policy::LeakyBucket(_) => format!("rate: {} per {w}", trim_float(limit)),
        _ => format!("limit: {} per {w}", trim_float(limit)),
    };
    let who = if show_scope { format!(" per {}", lane.lane.scope) } else { String::new() };
    Panel {
        caption: format!(
            "{}{who}: {} admitted, {} rejected ({:.2}% admitted), at most {} in any {w}",
            lane.lane.algorithm,
            lane.admitted,
            lane.rejected,
            lane.allowed_ratio() * 100.0,
            lane.max_in_window
        ),
        bin,
        admitted,
        rejected,
        span,
        x_desc: "time".into(),
        bar_label: if per_bar == 1 { format!("per {w}") } else { format!("per {}", format_duration(bin)) },
        rejected_word: "rejected",
        line: Some((envelope, format!("admitted in the last {w}"))),
        limit: Some((limit, limit_label)),
    }
}

fn render(path: &Path, title: &str, panels: &[Panel]) -> Result<(), PlotError> {
    let svg = is_svg(path)?;
    if panels.is_empty() {
        return Err(PlotError::Empty);
    }
    register_font()?;
    let size = (WIDTH, TITLE_HEIGHT + PANEL_HEIGHT * panels.len() as u32);
    let draw_err = |message: String| PlotError::Draw { path: path.display().to_string(), message };
    if svg {
        draw(SVGBackend::new(path, size).into_drawing_area(), title, panels).map_err(draw_err)
    } else {
        draw(BitMapBackend::new(path, size).into_drawing_area(), title, panels).map_err(draw_err)
    }
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, title: &str, panels: &[Panel]) -> Result<(), String> {
    let e = |err: DrawingAreaErrorKind<DB::ErrorType>| err.to_string();
    root.fill(&WHITE).map_err(e)?;
    let body = root.titled(title, (FONT, 26)).map_err(e)?;
    for (panel, area) in panels.iter().zip(body.split_evenly((panels.len(), 1))) {
        draw_panel(&area, panel)?;
    }
    root.present().map_err(e)
}

/// The count that the sliding-window line is compared with: a window policy's limit scaled to
/// the measured window, or a bucket's rate times the window.
fn rate_line(policy: &Policy, window: Nanos) -> f64 {
    match policy {
        Policy::TokenBucket(p) => window as f64 / p.interval() as f64,
        Policy::LeakyBucket(p) => window as f64 / p.interval() as f64,
        p => p.limit() as f64 * window as f64 / p.window() as f64,
    }
}

/// The unit of a time axis of length `span`: seconds up to 10 minutes, minutes up to 10 hours,
/// hours beyond.
fn axis_unit(span: Nanos) -> (f64, &'static str) {
    const MINUTE: Nanos = 60 * NANOS_PER_SEC;
    match span {
        s if s <= 10 * MINUTE => (NANOS_PER_SEC as f64, "s"),
        s if s <= 600 * MINUTE => (MINUTE as f64, "min"),
        _ => (3_600.0 * NANOS_PER_SEC as f64, "h"),
    }
}

/// How a legend entry is drawn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    Bar,
    Line,
    Dashed,
}

fn draw_panel<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, p: &Panel) -> Result<(), String> {
    let e = |err: DrawingAreaErrorKind<DB::ErrorType>| err.to_string();
    let (unit, unit_name) = axis_unit(p.span);
    let x = |n: Nanos| n as f64 / unit;
    let line_top = p.line.as_ref().and_then(|(v, _)| v.iter().copied().max()).unwrap_or(0);
    let top = p.admitted.iter().zip(&p.rejected).map(|(a, r)| a + r).max().unwrap_or(0).max(line_top);
    let y_max = (top as f64).max(p.limit.as_ref().map_or(0.0, |l| l.0)) * 1.15 + 1.0;

    let (plot_area, legend_area) = area.split_horizontally(WIDTH - LEGEND_WIDTH);
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(&p.caption, (FONT, 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x(p.span), 0.0..y_max)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(format!("{} ({unit_name})", p.x_desc))
        .y_desc("requests")
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(245, 245, 245))
        .x_label_formatter(&|v| trim_float(*v))
        .y_label_formatter(&|v| trim_float(*v))
        .draw()
        .map_err(e)?;

    let gap = x(p.bin) * 0.1;
    let bar = |b: usize, lo: u64, hi: u64, color: RGBColor| {
        let x0 = x(b as u64 * p.bin);
        Rectangle::new([(x0 + gap, lo as f64), (x0 + x(p.bin) - gap, hi as f64)], color.filled())
    };
    let bars = p.admitted.len();
    chart
        .draw_series((0..bars).filter(|&b| p.admitted[b] > 0).map(|b| bar(b, 0, p.admitted[b], ADMITTED)))
        .map_err(e)?;
    chart
        .draw_series(
            (0..bars)
                .filter(|&b| p.rejected[b] > 0)
                .map(|b| bar(b, p.admitted[b], p.admitted[b] + p.rejected[b], REJECTED)),
        )
        .map_err(e)?;

    let mut legend = vec![
        (format!("admitted {}", p.bar_label), ADMITTED, Mark::Bar),
        (format!("{} {}", p.rejected_word, p.bar_label), REJECTED, Mark::Bar),
    ];
    if let Some((values, label)) = &p.line {
        let cells = values.len().max(1);
        let cell = |i: usize| x((i as u128 * p.span as u128 / cells as u128) as u64);
        let steps = values.iter().enumerate().flat_map(|(i, &v)| [(cell(i), v as f64), (cell(i + 1), v as f64)]);
        chart.draw_series(LineSeries::new(steps, SLIDING.stroke_width(2))).map_err(e)?;
        legend.push((label.clone(), SLIDING, Mark::Line));
    }
    if let Some((level, label)) = &p.limit {
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, *level), (x(p.span), *level)],
                8,
                5,
                ShapeStyle { color: BLACK.to_rgba(), filled: false, stroke_width: 2 },
            ))
            .map_err(e)?;
        legend.push((label.clone(), BLACK, Mark::Dashed));
    }

    // The legend, in its own column so that it never hides data.
    for (i, (label, color, mark)) in legend.into_iter().enumerate() {
        let y = 60 + 26 * i as i32;
        match mark {
            Mark::Bar => legend_area.draw(&Rectangle::new([(10, y - 7), (28, y + 7)], color.filled())).map_err(e)?,
            Mark::Dashed => {
                for x in [10, 22] {
                    legend_area.draw(&PathElement::new([(x, y), (x + 6, y)], color.stroke_width(2))).map_err(e)?;
                }
            }
            Mark::Line => {
                legend_area.draw(&PathElement::new([(10, y), (28, y)], color.stroke_width(3))).map_err(e)?;
            }
        }
        let style = TextStyle::from((FONT, 15).into_font()).pos(Pos::new(HPos::Left, VPos::Center));
        legend_area.draw(&Text::new(label, (36, y), style)).map_err(e)?;
    }
    Ok(())
}

fn trim_float(x: f64) -> String {
    let s = format!("{x:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arrival::Arrival;
    use crate::simulation::{KeyScope, Limits, Quiet, Simulation};

    fn results() -> RunResults {
        let sim = Simulation::new(&["fixed-window", "token-bucket"], &[KeyScope::Global], &Limits::default()).unwrap();
        let arrivals: Vec<Arrival> = (0..60).map(|i| Arrival::at(i * 50_000_000)).collect();
        sim.run(&arrivals, &mut Quiet).unwrap()
    }

    #[test]
    fn svg_has_titles_axes_and_legend() {
        let dir = std::env::temp_dir().join(format!("sluice-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.svg");
        plot(&path, &results(), "test figure", 3 * NANOS_PER_SEC).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in [
            "test figure",
            "fixed-window: 30 admitted, 30 rejected",
            "time (s)",
            "requests",
            "admitted per 1s",
            "rejected per 1s",
            "admitted in the last 1s",
            "limit: 10 per 1s",
            "rate: 10 per 1s",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn png_is_written_and_not_blank() {
        let dir = std::env::temp_dir().join(format!("sluice-sim-png-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.png");
        plot(&path, &results(), "test figure", 3 * NANOS_PER_SEC).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        // Width and height from the IHDR chunk.
        assert_eq!(u32::from_be_bytes(bytes[16..20].try_into().unwrap()), WIDTH);
        assert_eq!(u32::from_be_bytes(bytes[20..24].try_into().unwrap()), TITLE_HEIGHT + 2 * PANEL_HEIGHT);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn timelines_draw_one_panel_per_series_with_long_runs_grouped() {
        let dir = std::env::temp_dir().join(format!("sluice-sim-timeline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let origin = 971_211_336 * NANOS_PER_SEC;
        let mut t = Timeline::new(&["per-ip (token-bucket)", "global (sliding-log)"], origin);
        // Two hours, one request a second: 7200 one-second bins, drawn as bars of a minute.
        for s in 0..7_200 {
            t.add(0, origin + s * NANOS_PER_SEC, s % 4 == 0);
        }
        t.add(1, origin, false);
        assert!(matches!(plot_timeline(&dir.join("t.gif"), &t, "x"), Err(PlotError::Format(_))));
        plot_timeline(&path, &t, "a day of traffic").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for text in [
            "a day of traffic",
            "per-ip (token-bucket): 5400 admitted, 1800 denied (25.00% denied)",
            "global (sliding-log): 1 admitted, 0 denied (0.00% denied)",
            "time since 2000-10-10T20:55:36Z (min)",
            "denied per 1m",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
        let empty = Timeline::new(&["p"], 0);
        assert!(matches!(plot_timeline(&path, &empty, "x"), Err(PlotError::Empty)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bars_are_round_lengths() {
        let s = NANOS_PER_SEC;
        assert_eq!(bar_bins(s, 100), 1);
        assert_eq!(bar_bins(s, 151), 2);
        assert_eq!(bar_bins(s, 7_200), 60);
        assert_eq!(bar_bins(4 * s, 4_096), 30, "two minutes of 4 s bins");
        assert_eq!(bar_bins(s, 150 * 604_800 * 3), 3 * 604_800, "beyond a week: whatever fits");
    }

    #[test]
    fn unknown_extensions_are_refused() {
        let e = plot(Path::new("x.gif"), &results(), "t", NANOS_PER_SEC).unwrap_err();
        assert!(matches!(e, PlotError::Format(_)));
    }

    #[test]
    fn the_comparison_line_is_the_rate_per_window() {
        let l = Limits::default();
        assert_eq!(rate_line(&l.policy("sliding-log").unwrap(), NANOS_PER_SEC), 10.0);
        assert_eq!(rate_line(&l.policy("sliding-log").unwrap(), 2 * NANOS_PER_SEC), 20.0);
        assert_eq!(rate_line(&l.policy("token-bucket").unwrap(), NANOS_PER_SEC), 10.0);
    }
}
