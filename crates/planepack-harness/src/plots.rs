//! SVG plots, drawn from the records with plotters.
//!
//! Every plot keeps its legend outside the plotting area (a right-hand column), gives each
//! codec a colour and a marker shape by family (circle: planepack, triangle: C-Blosc2 through
//! its Rust binding, square: zstd and LZ4, cross: peers measured through their PyPI packages),
//! and formats log-axis ticks with enough digits that no two read the same.

use crate::report::{categories, codecs, covers, geomean_by, ratio_table, select};
use crate::Record;
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const PALETTE: [RGBColor; 20] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(0, 0, 0),
    RGBColor(120, 60, 160),
    RGBColor(0, 90, 60),
    RGBColor(200, 160, 0),
    RGBColor(90, 90, 200),
    RGBColor(170, 30, 100),
    RGBColor(0, 150, 110),
    RGBColor(230, 85, 13),
    RGBColor(100, 150, 255),
    RGBColor(110, 70, 20),
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plot: {e:?}")
}

/// Marker shape of a codec, by who implemented it (the palette repeats past 19 codecs, so
/// the shape tells the families apart where colours coincide).
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    /// planepack's own codecs (solid lines in the line plots).
    Circle,
    Triangle,
    Square,
    Cross,
    /// OpenZL's graphs: open circles.
    Ring,
}

fn shape_of(codec: &str) -> Shape {
    if codec.starts_with("blosc2-") {
        Shape::Triangle
    } else if codec.starts_with("zstd") || codec == "lz4" {
        Shape::Square
    } else if codec == "zipnn" || codec.starts_with("pyblosc2") {
        Shape::Cross
    } else if codec.starts_with("openzl") {
        Shape::Ring
    } else {
        Shape::Circle
    }
}

/// A marker of `shape` at backend pixel `(x, y)`.
fn marker_at(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    shape: Shape,
    (x, y): (i32, i32),
    c: RGBColor,
) -> Result<()> {
    let r = 5;
    match shape {
        Shape::Circle => area.draw(&Circle::new((x, y), r, c.filled())),
        Shape::Triangle => area.draw(&TriangleMarker::new((x, y), r + 1, c.filled())),
        Shape::Square => area.draw(&Rectangle::new(
            [(x - r, y - r), (x + r, y + r)],
            c.filled(),
        )),
        Shape::Cross => area.draw(&Cross::new((x, y), r, c.stroke_width(2))),
        Shape::Ring => area.draw(&Circle::new((x, y), r, c.stroke_width(2))),
    }
    .map_err(err)
}

/// A tick label that tells close ticks apart: 0.25, 0.5, 1.5, 12.
pub fn tick(v: f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        "0".to_owned()
    } else if a < 0.1 {
        format!("{v:.4}")
    } else if a < 10.0 {
        // Two decimals (trimmed below): ticks 0.05 apart stay apart (1.05 and 1.1, not
        // 1.1 twice).
        format!("{v:.3}")
    } else if a < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}

/// Split a drawing into the plotting area and a right-hand legend column of `legend_w` px.
fn with_legend<'a>(
    root: &DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    legend_w: u32,
) -> (
    DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
    DrawingArea<SVGBackend<'a>, plotters::coord::Shift>,
) {
    let (w, _) = root.dim_in_pixel();
    root.split_horizontally(w.saturating_sub(legend_w))
}

/// Legend entries (name, colour index, shape, line?) stacked from the top of `area`.
fn legend(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    entries: &[(String, usize, Option<Shape>)],
) -> Result<()> {
    let font = ("sans-serif", 14).into_font();
    for (k, (name, ci, shape)) in entries.iter().enumerate() {
        let y = 40 + 22 * k as i32;
        let c = color(*ci);
        match shape {
            Some(s) => marker_at(area, *s, (14, y), c)?,
            None => area
                .draw(&PathElement::new(vec![(4, y), (26, y)], c.stroke_width(3)))
                .map_err(err)?,
        }
        area.draw(&Text::new(name.clone(), (34, y - 8), font.color(&c)))
            .map_err(err)?;
    }
    Ok(())
}

/// The points not dominated by another (higher ratio and higher speed), sorted by speed.
pub fn pareto(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut front: Vec<(f64, f64)> = points
        .iter()
        .filter(|p| {
            !points
                .iter()
                .any(|q| q != *p && q.0 >= p.0 && q.1 >= p.1 && (q.0 > p.0 || q.1 > p.1))
        })
        .cloned()
        .collect();
    front.sort_by(|a, b| a.0.total_cmp(&b.0));
    front.dedup();
    front
}

/// Ratio against single-core decode speed, one point per codec (geomeans over the category's
/// groups), with the Pareto front; names in the legend, not beside the points. A codec that
/// did not take every tensor of the category (the tables' `part`) has no point: a geomean over
/// the tensors it chose would stand beside the others' over all of them.
pub fn ratio_vs_decode(r: &[Record], category: &str, path: &Path) -> Result<()> {
    let cs = codecs(r);
    let mut pts = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        let recs = select(r, Some(category), c);
        if recs.is_empty() || !covers(r, c, |x| x.category == category) {
            continue;
        }
        let ratio = geomean_by(&recs, |x| x.ratio);
        let dec = geomean_by(&recs, |x| x.decode_gbps);
        pts.push((dec, ratio, c.clone(), i));
    }
    let xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    let ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
    let (x0, x1) = (
        xs.iter().cloned().fold(f64::MAX, f64::min) * 0.7,
        xs.iter().cloned().fold(0.0, f64::max) * 1.5,
    );
    let (y0, y1) = (
        ys.iter().cloned().fold(f64::MAX, f64::min).min(1.0) * 0.95,
        ys.iter().cloned().fold(0.0, f64::max) * 1.08,
    );
    let root = SVGBackend::new(path, (1100, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = with_legend(&root, 250);
    let mut chart = ChartBuilder::on(&left)
        .caption(
            format!("{category}: ratio vs single-core decode (geomean over datasets)"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((x0.max(1e-3)..x1.max(1e-2)).log_scale(), y0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("decode GB/s, one CPU core (log scale)")
        .y_desc("compression ratio")
        .max_light_lines(2)
        .x_labels(12)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .draw()
        .map_err(err)?;
    let front = pareto(&pts.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>());
    chart
        .draw_series(LineSeries::new(
            front,
            ShapeStyle::from(&BLACK.mix(0.3)).stroke_width(2),
        ))
        .map_err(err)?;
    for (x, y, name, i) in &pts {
        marker_at(
            &left,
            shape_of(name),
            chart.backend_coord(&(*x, *y)),
            color(*i),
        )?;
    }
    let mut entries: Vec<(String, usize, Option<Shape>)> = pts
        .iter()
        .map(|(_, _, n, i)| (n.clone(), *i, Some(shape_of(n))))
        .collect();
    entries.push(("Pareto front (grey)".into(), 7, None));
    legend(&right, &entries)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Geomean ratio per codec, one panel per category, each on its own scale (GNN's 10-100x
/// would flatten the 1.1-1.5x of the others): a stem from 1.0 (no compression) to each
/// codec's ratio.
pub fn ratio_by_codec(r: &[Record], path: &Path) -> Result<()> {
    let cats = categories(r);
    let cs = codecs(r);
    let table = ratio_table(r);
    let root = SVGBackend::new(path, (1300, 760)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = with_legend(&root, 250);
    let (title, body) = left.split_vertically(40);
    title
        .draw(&Text::new(
            "Compression ratio per codec, geomean over each category's datasets (own scale per panel)",
            (15, 10),
            ("sans-serif", 20).into_font(),
        ))
        .map_err(err)?;
    let cols = 3usize.min(cats.len().max(1));
    let rows = cats.len().div_ceil(cols).max(1);
    let panels = body.split_evenly((rows, cols));
    for (cat, panel) in cats.iter().zip(&panels) {
        let vals: Vec<(usize, f64)> = cs
            .iter()
            .enumerate()
            .filter_map(|(i, c)| table.get(&(cat.clone(), c.clone())).map(|&v| (i, v)))
            .collect();
        let hi = vals.iter().map(|v| v.1).fold(1.0, f64::max);
        let lo = vals.iter().map(|v| v.1).fold(1.0, f64::min);
        let pad = (hi - lo).max(0.05) * 0.08;
        let floor = (lo - pad).max(0.0);
        let mut chart = ChartBuilder::on(panel)
            .caption(cat, ("sans-serif", 17))
            .margin(12)
            .x_label_area_size(10)
            .y_label_area_size(50)
            .build_cartesian_2d(-0.5..cs.len() as f64 - 0.5, floor..(hi + pad))
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_labels(6)
            .y_label_formatter(&|v| tick(*v))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(-0.5, 1.0), (cs.len() as f64 - 0.5, 1.0)],
                BLACK.mix(0.5),
            )))
            .map_err(err)?;
        for &(i, v) in &vals {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(i as f64, 1.0), (i as f64, v)],
                    color(i).stroke_width(2),
                )))
                .map_err(err)?;
            // backend_coord is in the whole drawing's pixels: draw on the root.
            marker_at(
                &root,
                shape_of(&cs[i]),
                chart.backend_coord(&(i as f64, v)),
                color(i),
            )?;
        }
    }
    let entries: Vec<(String, usize, Option<Shape>)> = cs
        .iter()
        .enumerate()
        .map(|(i, c)| (c.clone(), i, Some(shape_of(c))))
        .collect();
    legend(&right, &entries)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Transfer-and-decode speed over raw, eq. (2), against the link speed, per codec, for one
/// category (geomean ratio; B = the codec's all-core CPU decode measured here). A codec helps
/// only where its line is above 1; at PCIe speeds a CPU decoder is slower than the link, so
/// every line meets 1 there: the plot shows where that happens. Codecs that did not take
/// every tensor of the category have no line (as in [`ratio_vs_decode`]).
pub fn effective_bandwidth(r: &[Record], category: &str, path: &Path) -> Result<()> {
    let cs = codecs(r);
    let links: Vec<f64> = (0..=48).map(|k| 0.25 * 2f64.powf(k as f64 / 6.0)).collect();
    let mut series = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        let recs = select(r, Some(category), c);
        if recs.is_empty() || c == "raw" || !covers(r, c, |x| x.category == category) {
            continue;
        }
        let ratio = geomean_by(&recs, |x| x.ratio);
        let b = geomean_by(&recs, |x| x.decode_allcore_gbps);
        let pts: Vec<(f64, f64)> = links
            .iter()
            .map(|&g| (g, planepack_core::transfer::effective_gbps(ratio, g, b) / g))
            .collect();
        series.push((c.clone(), i, pts));
    }
    let ymax = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(2.0, f64::max)
        * 1.2;
    let root = SVGBackend::new(path, (1100, 620)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = with_legend(&root, 250);
    let title = format!("{category}: transfer + CPU decode vs sending raw, eq. (2)");
    // A log axis only where the speed-ups span a decade; a narrow range reads better linear.
    if ymax > 5.0 {
        // Key points of our own: plotters' log key points list each decade's end twice
        // (a doubled "10" label).
        let keys: Vec<f64> = [1.0, 2.0, 3.0, 5.0]
            .iter()
            .flat_map(|m| [1.0, 10.0, 100.0, 1000.0].map(|d| m * d))
            .filter(|k| (0.9..=ymax).contains(k))
            .collect();
        speedup_chart(
            &left,
            &title,
            (0.9..ymax).log_scale().with_key_points(keys),
            &series,
        )?;
    } else {
        speedup_chart(&left, &title, 0.9..ymax, &series)?;
    }
    let entries: Vec<(String, usize, Option<Shape>)> = series
        .iter()
        .map(|(n, i, _)| (n.clone(), *i, None))
        .collect();
    legend(&right, &entries)?;
    root.present().map_err(err)?;
    Ok(())
}

/// One line of a chart: its label, its colour index and its points.
type Series = (String, usize, Vec<(f64, f64)>);

/// The lines of [`effective_bandwidth`] on a y axis of the caller's kind.
fn speedup_chart<Y>(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y: Y,
    series: &[Series],
) -> Result<()>
where
    Y: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    Y::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((0.25..64.0).log_scale(), y)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("link GB/s (log; PCIe 3/4/5 x16 achieve about 12/25/53)")
        .y_desc("speed-up over sending raw (1 = no gain)")
        .max_light_lines(1)
        .y_labels(12)
        .x_labels(12)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .draw()
        .map_err(err)?;
    for (name, i, pts) in series {
        let style = color(*i).stroke_width(if shape_of(name) == Shape::Circle {
            3
        } else {
            2
        });
        if shape_of(name) == Shape::Circle {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(err)?;
        } else {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Draw every plot into `dir`; returns the files written.
pub fn all(r: &[Record], dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for c in categories(r) {
        let p = dir.join(format!("ratio-vs-decode-{c}.svg"));
        ratio_vs_decode(r, &c, &p)?;
        files.push(p);
    }
    let p = dir.join("ratio-by-codec.svg");
    ratio_by_codec(r, &p)?;
    files.push(p);
    for c in categories(r) {
        let p = dir.join(format!("effective-bandwidth-{c}.svg"));
        effective_bandwidth(r, &c, &p)?;
        files.push(p);
    }
    Ok(files)
}

/// A plain line plot: one series per (label, points), each with its own colour, marker shape
/// and dash pattern, legend at the right.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<()> {
    let pts = series.iter().flat_map(|s| s.1.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 >= x1 {
        x1 = x0 + 1.0;
    }
    let root = SVGBackend::new(path, (1100, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (left, right) = with_legend(&root, 230);
    let mut chart = ChartBuilder::on(&left)
        .caption(title, ("sans-serif", 19))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(x0..x1, 0.0..(y1 * 1.1).max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(12)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .draw()
        .map_err(err)?;
    const SHAPES: [Shape; 4] = [Shape::Circle, Shape::Triangle, Shape::Square, Shape::Cross];
    let mut entries = Vec::new();
    for (i, (name, pts)) in series.iter().enumerate() {
        let style = color(i).stroke_width(2);
        if i % 2 == 0 {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(err)?;
        } else {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style))
                .map_err(err)?;
        }
        let shape = SHAPES[i % SHAPES.len()];
        for p in pts {
            marker_at(&left, shape, chart.backend_coord(p), color(i))?;
        }
        entries.push((name.clone(), i, Some(shape)));
    }
    legend(&right, &entries)?;
    root.present().map_err(err)?;
    Ok(())
}
