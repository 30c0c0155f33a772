//! The service's work per report without HTTP (`--inprocess-reports`): parse, merge and reply,
//! timed in this process's CPU time.

use crate::fleet::Fleet;
use crate::process::{clock_ticks, cpu_seconds};
use serde::Serialize;
use std::time::Instant;
use tailweight_weights::{WeightBook, WeightParams};
use tailweight_wire::protocol::Limits;
use tailweight_wire::report::read::parse_report;

/// The service's work per report without HTTP: what one core spends on the logic itself.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct InProcess {
    pub reports: u64,
    pub us_per_report: f64,
    pub reports_per_s: f64,
    pub recompute_ms: f64,
    /// Share of the handling time per phase, percent.
    pub share_pct: Phases,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Phases {
    pub parse: f64,
    pub ingest: f64,
    pub reply: f64,
}

pub(crate) fn time_inprocess(fleet: &Fleet, reports: u64) -> InProcess {
    let mut book = WeightBook::new(WeightParams::default());
    let limits = Limits::default();
    // Wall time per phase (sums; the shares are what matter, the total is measured in CPU time).
    let phases = std::cell::RefCell::new([0f64; 3]);
    let handle = |book: &mut WeightBook, now: u64| {
        let body = fleet.body();
        let t0 = Instant::now();
        if let Ok(report) = parse_report(&body, &limits) {
            let t1 = Instant::now();
            // As the service does with --identity report: the reporter is its own principal.
            if book.ingest_as(&report, &report.reporter, now).is_ok() {
                let t2 = Instant::now();
                let mut out = Vec::with_capacity(body.len());
                let names = report.clusters.iter().map(|c| c.name.as_str());
                book.reply_plan(&report.reporter, &report.reporter, names, now, usize::MAX).render(&mut out);
                std::hint::black_box(out);
                let t3 = Instant::now();
                let mut p = phases.borrow_mut();
                for (i, (a, b)) in [(t0, t1), (t1, t2), (t2, t3)].into_iter().enumerate() {
                    p[i] += (b - a).as_secs_f64();
                }
                return;
            }
        }
        // A body the service would refuse would make the timing meaningless.
        panic!("in-process timing: a generated report was refused");
    };
    // Register everyone first (twice: counters need a window), as the HTTP warm-up does.
    for i in 0..2 * fleet.reporters as u64 {
        handle(&mut book, 1_000_000 + i);
    }
    let r0 = Instant::now();
    for k in 0..5 {
        book.recompute(5_000_000 + k * 1_000);
    }
    let recompute_ms = r0.elapsed().as_secs_f64() * 1e3 / 5.0;
    // CPU time of this (single-threaded) process, not wall time: the machine is shared, and being
    // preempted is not work. Falls back to wall time where /proc is unavailable.
    let ticks = clock_ticks();
    let me = std::process::id();
    let cpu_now = || cpu_seconds(me, ticks);
    let timed = |f: &mut dyn FnMut()| -> f64 {
        let (c0, t0) = (cpu_now(), Instant::now());
        f();
        match (c0, cpu_now()) {
            (Some(a), Some(b)) => b - a,
            _ => t0.elapsed().as_secs_f64(),
        }
    };
    let total = timed(&mut || {
        for i in 0..reports {
            handle(&mut book, 6_000_000 + i);
        }
    });
    // Making the bodies is the sidecars' work, not the service's: time it alone and take it out.
    let making = timed(&mut || {
        for _ in 0..reports {
            std::hint::black_box(fleet.body());
        }
    });
    let secs = (total - making).max(1e-9);
    let p = *phases.borrow();
    let sum: f64 = p.iter().sum::<f64>().max(1e-12);
    let share = |i: usize| (p[i] / sum * 1000.0).round() / 10.0;
    InProcess {
        reports,
        us_per_report: secs * 1e6 / reports.max(1) as f64,
        reports_per_s: reports as f64 / secs,
        recompute_ms,
        share_pct: Phases { parse: share(0), ingest: share(1), reply: share(2) },
    }
}
