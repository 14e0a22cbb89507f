//! The throughput chart of a session's page: quests decided per minute as
//! the bars of an inline SVG, drawn on the server (no script, no library).

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::store::Throughput;

/// The drawing area, in SVG user units; the chart scales to its box.
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 160.0;
/// Room on the left for the scale and below for the times.
const LEFT: f64 = 36.0;
const BOTTOM: f64 = 22.0;
const TOP: f64 = 8.0;

/// One minute's bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub x: f64,
    pub y: f64,
    pub width: f64,
    pub height: f64,
    pub count: u64,
    /// `10:04 UTC`
    pub minute: String,
}

/// A horizontal line of the scale.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    pub y: f64,
    pub label: u64,
}

/// A time under the bars.
#[derive(Debug, Clone, Serialize)]
pub struct Tick {
    pub x: f64,
    pub label: String,
}

/// Everything the template draws.
#[derive(Debug, Clone, Serialize)]
pub struct Chart {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub baseline: f64,
    pub bars: Vec<Bar>,
    pub lines: Vec<Line>,
    pub ticks: Vec<Tick>,
    pub total: u64,
    pub peak: u64,
    pub minutes: usize,
}

/// A round top for the scale at or above `peak`: 1, 2, 5, 10, 20, 50, ...
fn nice_top(peak: u64) -> u64 {
    let mut step = 1;
    loop {
        for m in [1, 2, 5] {
            if step * m >= peak {
                return step * m;
            }
        }
        step *= 10;
    }
}

fn minute_label(t: DateTime<Utc>) -> String {
    t.format("%H:%M").to_string()
}

/// The chart of `t`: one bar per minute, oldest on the left.
pub fn throughput(t: &Throughput) -> Chart {
    let peak = t.per_minute.iter().copied().max().unwrap_or(0);
    let frame = Frame::new(t, nice_top(peak.max(1)));
    Chart {
        width: WIDTH,
        height: HEIGHT,
        left: LEFT,
        baseline: frame.baseline,
        bars: frame.bars(&t.per_minute),
        lines: frame.lines(),
        ticks: frame.ticks(),
        total: t.per_minute.iter().sum(),
        peak,
        minutes: frame.minutes,
    }
}

/// Where things go: the minutes across, the scale up to `top`.
struct Frame {
    minutes: usize,
    top: u64,
    /// The first minute shown.
    start: DateTime<Utc>,
    baseline: f64,
    /// The height of the plot above the baseline.
    plot: f64,
    /// The width of one minute.
    slot: f64,
}

impl Frame {
    fn new(t: &Throughput, top: u64) -> Frame {
        let minutes = t.per_minute.len().max(1);
        let baseline = HEIGHT - BOTTOM;
        Frame {
            minutes,
            top,
            start: t.until - TimeDelta::minutes(minutes as i64 - 1),
            baseline,
            plot: baseline - TOP,
            slot: (WIDTH - LEFT) / minutes as f64,
        }
    }

    fn height(&self, value: u64) -> f64 {
        value as f64 / self.top as f64 * self.plot
    }

    fn minute(&self, i: usize) -> String {
        minute_label(self.start + TimeDelta::minutes(i as i64))
    }

    fn bars(&self, per_minute: &[u64]) -> Vec<Bar> {
        let slot = self.slot;
        per_minute
            .iter()
            .enumerate()
            .map(|(i, &count)| {
                let height = self.height(count);
                Bar {
                    x: LEFT + i as f64 * slot + slot * 0.15,
                    y: self.baseline - height,
                    width: slot * 0.7,
                    height,
                    count,
                    minute: self.minute(i),
                }
            })
            .collect()
    }

    /// The scale's lines: at zero, at the top, and halfway when that is a whole number.
    fn lines(&self) -> Vec<Line> {
        let half = self.top.is_multiple_of(2).then_some(self.top / 2);
        [Some(0), half, Some(self.top)]
            .into_iter()
            .flatten()
            .map(|v| Line {
                y: self.baseline - self.height(v),
                label: v,
            })
            .collect()
    }

    /// About five times under the bars, the last one `now`.
    fn ticks(&self) -> Vec<Tick> {
        let n = self.minutes;
        (0..n)
            .step_by((n / 4).max(1))
            .chain(std::iter::once(n - 1))
            .map(|i| Tick {
                x: LEFT + i as f64 * self.slot + self.slot / 2.0,
                label: if i == n - 1 {
                    "now".to_owned()
                } else {
                    self.minute(i)
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn the_tallest_minute_reaches_a_round_top_of_the_scale() {
        let t = Throughput {
            until: at("2026-12-01T10:59:00Z"),
            per_minute: vec![0, 3, 7, 0],
        };
        let c = throughput(&t);
        assert_eq!(c.bars.len(), 4);
        assert_eq!(c.total, 10);
        assert_eq!(c.peak, 7);
        assert_eq!(c.lines.last().unwrap().label, 10, "7 rounds up to 10");
        assert_eq!(c.bars[0].height, 0.0);
        assert!(c.bars[2].height > c.bars[1].height);
        assert!((c.bars[2].y - (c.baseline - 0.7 * (c.baseline - TOP))).abs() < 1e-9);
        assert_eq!(c.bars[0].minute, "10:56");
        assert_eq!(c.ticks.last().unwrap().label, "now");
    }

    #[test]
    fn round_tops() {
        assert_eq!(
            [1, 2, 3, 6, 11, 99, 101].map(nice_top),
            [1, 2, 5, 10, 20, 100, 200]
        );
    }
}
