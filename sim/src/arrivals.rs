//! Requests as they arrive at the client proxies: open-loop Poisson at the scenario's rate (the
//! merge of the clients' independent Poisson streams is one Poisson stream whose requests go to a
//! uniformly drawn client), or the times in a trace file. Each request also carries the random part
//! of its service time, drawn here, so every policy serves the very same trace.

use crate::dist::{exp1, normal_pair};
use crate::scenario::Service;
use tailweight_math::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Arrival {
    pub at_ns: u64,
    pub client: u32,
    /// Standard normal (lognormal service) or Exp(1) (exponential service); see `service_factor`.
    pub draw: f64,
}

impl Arrival {
    /// This request's service-time factor (mean 1) at an endpoint with jitter `sigma`.
    pub fn service_factor(draw: f64, service: Service, sigma: f64) -> f64 {
        match service {
            Service::Exponential => draw,
            Service::Lognormal => (sigma * draw - sigma * sigma / 2.0).exp(),
        }
    }
}

pub struct Arrivals {
    source: Source,
    rng: Rng,
    clients: u32,
    service: Service,
    end_ns: u64,
    /// Box-Muller gives normals in pairs: the second waits here.
    spare_normal: Option<f64>,
}

enum Source {
    Poisson { mean_gap_ns: f64, clock_ns: f64 },
    Trace { times: Vec<(u64, Option<u32>)>, next: usize },
}

impl Arrivals {
    pub fn poisson(qps: f64, clients: u32, service: Service, end_ns: u64, seed: u64) -> Arrivals {
        Arrivals {
            source: Source::Poisson { mean_gap_ns: 1e9 / qps, clock_ns: 0.0 },
            rng: Rng::new(seed),
            clients,
            service,
            end_ns,
            spare_normal: None,
        }
    }

    /// Parse a trace: one request per line, `seconds[,client]` (seconds from the start of the run,
    /// non-decreasing; without a client one is drawn uniformly). `#` starts a comment.
    pub fn trace(text: &str, clients: u32, service: Service, end_ns: u64, seed: u64) -> Result<Arrivals, String> {
        let mut times = Vec::new();
        let mut last = 0u64;
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let at = |what: &str| format!("trace line {}: {what}", n + 1);
            let (secs, client) = match line.split_once(',') {
                Some((s, c)) => (s.trim(), Some(c.trim())),
                None => (line, None),
            };
            let secs: f64 = secs.parse().map_err(|_| at(&format!("{secs:?} is not a number of seconds")))?;
            if !secs.is_finite() || !(0.0..1e7).contains(&secs) {
                return Err(at(&format!("{secs} is outside 0..1e7 seconds")));
            }
            let t = (secs * 1e9).round() as u64;
            if t < last {
                return Err(at("times must not decrease"));
            }
            last = t;
            let client = match client {
                None => None,
                Some(c) => match c.parse::<u32>() {
                    Ok(c) if c < clients => Some(c),
                    _ => return Err(at(&format!("client {c:?} is not in 0..{clients}"))),
                },
            };
            times.push((t, client));
        }
        Ok(Arrivals {
            source: Source::Trace { times, next: 0 },
            rng: Rng::new(seed),
            clients,
            service,
            end_ns,
            spare_normal: None,
        })
    }
}

impl Iterator for Arrivals {
    type Item = Arrival;

    fn next(&mut self) -> Option<Arrival> {
        let (at_ns, client) = match &mut self.source {
            Source::Poisson { mean_gap_ns, clock_ns } => {
                *clock_ns += exp1(&mut self.rng) * *mean_gap_ns;
                (*clock_ns as u64, None)
            }
            Source::Trace { times, next } => {
                let (t, c) = *times.get(*next)?;
                *next += 1;
                (t, c)
            }
        };
        if at_ns >= self.end_ns {
            return None;
        }
        let client = client.unwrap_or_else(|| self.rng.below(self.clients as usize) as u32);
        let draw = match self.service {
            Service::Exponential => exp1(&mut self.rng),
            Service::Lognormal => match self.spare_normal.take() {
                Some(z) => z,
                None => {
                    let (z, spare) = normal_pair(&mut self.rng);
                    self.spare_normal = Some(spare);
                    z
                }
            },
        };
        Some(Arrival { at_ns, client, draw })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_rate_and_client_split() {
        let mut a = Arrivals::poisson(1_000.0, 4, Service::Lognormal, 100_000_000_000, 1);
        let mut per_client = [0u32; 4];
        let mut n = 0;
        let mut last = 0;
        for x in a.by_ref() {
            assert!(x.at_ns >= last);
            last = x.at_ns;
            per_client[x.client as usize] += 1;
            n += 1;
        }
        // 100 s at 1,000/s: 100,000 +- a few hundred (sd 316).
        assert!((98_500..101_500).contains(&n), "{n}");
        for c in per_client {
            assert!((c as f64 / n as f64 - 0.25).abs() < 0.01, "{per_client:?}");
        }
    }

    #[test]
    fn trace_lines_and_errors() {
        let mut a =
            Arrivals::trace("# t,client\n0.5,1\n\n1.0\n2.0,0\n", 2, Service::Exponential, 1_500_000_000, 3).unwrap();
        let first = a.next().unwrap();
        assert_eq!((first.at_ns, first.client), (500_000_000, 1));
        assert_eq!(a.next().unwrap().at_ns, 1_000_000_000);
        assert!(a.next().is_none(), "2.0 s is past the end");
        for (text, want) in [
            ("1.0\n0.5\n", "trace line 2: times must not decrease"),
            ("x\n", "trace line 1: \"x\" is not a number"),
            ("1.0,7\n", "trace line 1: client \"7\" is not in 0..2"),
            ("-1\n", "trace line 1: -1 is outside"),
        ] {
            let err = Arrivals::trace(text, 2, Service::Exponential, 10, 3).err().unwrap();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn lognormal_factor_has_mean_one_and_its_variance() {
        let mut rng = Rng::new(2);
        let xs: Vec<f64> =
            (0..200_000).map(|_| Arrival::service_factor(normal_pair(&mut rng).0, Service::Lognormal, 0.2)).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        // Var of LogNormal(-s^2/2, s) = exp(s^2) - 1.
        assert!((mean - 1.0).abs() < 0.005 && (var - (0.04f64.exp() - 1.0)).abs() < 0.003, "{mean} {var}");
        assert_eq!(Arrival::service_factor(0.7, Service::Lognormal, 0.0), 1.0);
        assert_eq!(Arrival::service_factor(0.7, Service::Exponential, 0.2), 0.7);
    }

    #[test]
    fn same_seed_same_trace() {
        let draw = |seed| {
            let a = Arrivals::poisson(100.0, 10, Service::Lognormal, 10_000_000_000, seed);
            a.collect::<Vec<_>>()
        };
        assert_eq!(draw(4), draw(4));
        assert_ne!(draw(4), draw(5));
    }
}
