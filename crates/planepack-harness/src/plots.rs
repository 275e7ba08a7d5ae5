//! SVG plots, drawn from the records with plotters.

use crate::report::{categories, codecs, geomean_by, ratio_table, select};
use crate::Record;
use anyhow::{anyhow, Result};
use plotters::prelude::*;
use std::path::{Path, PathBuf};

const PALETTE: [RGBColor; 12] = [
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
];

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plot: {e:?}")
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
/// groups), with the Pareto front.
pub fn ratio_vs_decode(r: &[Record], category: &str, path: &Path) -> Result<()> {
    let cs = codecs(r);
    let mut pts = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        let recs = select(r, Some(category), c);
        if recs.is_empty() {
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
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{category}: ratio vs decode speed (geomean over datasets)"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d((x0.max(1e-3)..x1.max(1e-2)).log_scale(), y0..y1)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("decode GB/s, one CPU core (log)")
        .y_desc("compression ratio")
        .draw()
        .map_err(err)?;
    let front = pareto(&pts.iter().map(|p| (p.0, p.1)).collect::<Vec<_>>());
    chart
        .draw_series(LineSeries::new(
            front,
            ShapeStyle::from(&BLACK.mix(0.4)).stroke_width(2),
        ))
        .map_err(err)?
        .label("Pareto front")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLACK.mix(0.4)));
    for (x, y, name, i) in &pts {
        chart
            .draw_series(std::iter::once(Circle::new(
                (*x, *y),
                5,
                color(*i).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                format!(" {name}"),
                (*x, *y),
                ("sans-serif", 13).into_font().color(&color(*i)),
            )))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Grouped bars: geomean ratio per codec, one group per category.
pub fn ratio_by_codec(r: &[Record], path: &Path) -> Result<()> {
    let cats = categories(r);
    let cs = codecs(r);
    let table = ratio_table(r);
    let ymax = table.values().cloned().fold(1.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (1100, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let n = cats.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Compression ratio per codec and category (geomean)",
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..n, 0.0..ymax)
        .map_err(err)?;
    let labels = cats.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(cats.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.01 && i < labels.len() {
                labels[i].clone()
            } else {
                String::new()
            }
        })
        .y_desc("ratio")
        .draw()
        .map_err(err)?;
    let w = 0.8 / cs.len() as f64;
    for (ci, c) in cs.iter().enumerate() {
        let bars: Vec<Rectangle<(f64, f64)>> = cats
            .iter()
            .enumerate()
            .filter_map(|(k, cat)| {
                table.get(&(cat.clone(), c.clone())).map(|&v| {
                    let x = k as f64 + 0.1 + ci as f64 * w;
                    Rectangle::new([(x, 0.0), (x + w * 0.9, v)], color(ci).filled())
                })
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(err)?
            .label(c.clone())
            .legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], color(ci).filled())
            });
    }
    chart
        .draw_series(std::iter::once(PathElement::new(
            vec![(0.0, 1.0), (n, 1.0)],
            BLACK.mix(0.5),
        )))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// Effective bandwidth against link bandwidth, eq. (2), per codec, for one category (geomean
/// ratio, geomean all-core CPU decode as B).
pub fn effective_bandwidth(r: &[Record], category: &str, path: &Path) -> Result<()> {
    let cs = codecs(r);
    let links: Vec<f64> = (1..=70).map(|g| g as f64).collect();
    let mut series = Vec::new();
    for (i, c) in cs.iter().enumerate() {
        let recs = select(r, Some(category), c);
        if recs.is_empty() {
            continue;
        }
        let ratio = geomean_by(&recs, |x| x.ratio);
        let b = geomean_by(&recs, |x| x.decode_allcore_gbps);
        let pts: Vec<(f64, f64)> = links
            .iter()
            .map(|&g| (g, planepack_core::transfer::effective_gbps(ratio, g, b)))
            .collect();
        series.push((c.clone(), i, pts));
    }
    let ymax = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(70.0, f64::max)
        * 1.05;
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{category}: effective bandwidth, eq. (2), B = all-core CPU decode"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..70.0, 0.0..ymax)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("link bandwidth, GB/s (PCIe 3/4/5 x16 at about 12/25/53 GB/s achieved)")
        .y_desc("effective GB/s of raw tensor data")
        .draw()
        .map_err(err)?;
    for (name, i, pts) in series {
        chart
            .draw_series(LineSeries::new(
                pts,
                ShapeStyle::from(&color(i)).stroke_width(2),
            ))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color(i)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
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

/// A plain line plot: one series per (label, points).
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
    let root = SVGBackend::new(path, (900, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(55)
        .build_cartesian_2d(x0..x1, 0.0..(y1 * 1.1).max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                pts.clone(),
                ShapeStyle::from(&color(i)).stroke_width(2),
            ))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], color(i)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color(i).filled())))
            .map_err(err)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
