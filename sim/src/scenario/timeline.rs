//! The scenario's timeline: events (what happens to which backends when) and segments (named parts
//! of the recorded part), checked against the duration and the endpoint set they change.

use super::range::{integer, number};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// How long a leaving backend keeps listening after it left the endpoint set, by default.
pub const LEAVE_STOP_S: f64 = 3.0;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioEvent {
    pub at_s: f64,
    pub backends: Vec<usize>,
    pub action: Action,
    /// speed: the new multiplier; leave: seconds until the backend stops listening.
    #[serde(default)]
    pub value: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Speed,
    Fail,
    Stop,
    Recover,
    Join,
    Leave,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    pub name: String,
    pub from_s: f64,
}

/// The action as the file spells it.
pub fn action_name(a: Action) -> &'static str {
    match a {
        Action::Speed => "speed",
        Action::Fail => "fail",
        Action::Stop => "stop",
        Action::Recover => "recover",
        Action::Join => "join",
        Action::Leave => "leave",
    }
}

/// Each event checked on its own (named by its place in the file), then in time order (file
/// order among equal times) against the endpoint set it changes: a join names a backend outside
/// it (declared absent: true, or one that left and has stopped listening), a leave one inside
/// it, and no event empties it.
pub fn in_time_order(
    mut events: Vec<ScenarioEvent>,
    absent: &[bool],
    duration_s: f64,
) -> Result<Vec<ScenarioEvent>, String> {
    let n = absent.len();
    for (e, ev) in events.iter_mut().enumerate() {
        let at = |f: &str| format!("events[{e}].{f}");
        number(&at("at_s"), ev.at_s, 0.0, duration_s)?;
        if ev.backends.is_empty() {
            return Err(format!("{}: expected a non-empty list of backend indices", at("backends")));
        }
        for &b in &ev.backends {
            integer(&at("backends"), b as u64, 0, n as u64 - 1)?;
        }
        ev.value = match (ev.action, ev.value) {
            (Action::Speed, None) => return Err(format!("events[{e}]: action speed needs value (the new multiplier)")),
            (Action::Speed, Some(v)) => Some(number(&at("value"), v, 0.001, 1000.0)?),
            (Action::Leave, v) => Some(number(&at("value"), v.unwrap_or(LEAVE_STOP_S), 0.0, 3600.0)?),
            (action, Some(_)) => return Err(format!("events[{e}]: action {} takes no value", action_name(action))),
            (_, None) => None,
        };
    }
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by(|&a, &b| events[a].at_s.total_cmp(&events[b].at_s));
    let mut members: BTreeSet<usize> = (0..n).filter(|&b| !absent[b]).collect();
    let mut stops_at = vec![f64::NEG_INFINITY; n];
    for &e in &order {
        let ev = &events[e];
        let at = format!("events[{e}] ({} at {} s)", action_name(ev.action), ev.at_s);
        for &b in &ev.backends {
            match ev.action {
                Action::Join if members.contains(&b) => {
                    return Err(format!(
                        "{at}: backend {b} is already in the endpoint set (a join names a backend declared \
                         absent: true, or one that left)"
                    ))
                }
                Action::Join if stops_at[b] > ev.at_s => {
                    return Err(format!(
                        "{at}: backend {b} left and stops listening at {} s; it can join again only after that",
                        stops_at[b]
                    ))
                }
                Action::Join => _ = members.insert(b),
                Action::Leave if !members.remove(&b) => {
                    return Err(format!("{at}: backend {b} is not in the endpoint set then"))
                }
                Action::Leave => stops_at[b] = ev.at_s + ev.value.unwrap_or(LEAVE_STOP_S),
                _ => {}
            }
        }
        if members.is_empty() {
            return Err(format!("{at}: leaves the endpoint set empty"));
        }
    }
    Ok(order.into_iter().map(|e| events[e].clone()).collect())
}

/// The first from 0, each later one starting later, all before the end; names are distinct words.
pub fn check_segments(segments: &[Segment], duration_s: f64) -> Result<(), String> {
    if segments.is_empty() {
        return Err("segments: expected a non-empty list of {name, from_s}".into());
    }
    for (k, seg) in segments.iter().enumerate() {
        let at = |f: &str| format!("segments[{k}].{f}");
        let word = seg.name.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
            && seg.name.chars().all(|c| c.is_alphanumeric() || c == '_');
        if !word {
            return Err(format!("{}: expected a word (letters, digits, _), got {:?}", at("name"), seg.name));
        }
        if segments[..k].iter().any(|s| s.name == seg.name) {
            return Err(format!("{}: '{}' is used twice", at("name"), seg.name));
        }
        let from_s = number(&at("from_s"), seg.from_s, 0.0, duration_s)?;
        if k == 0 && from_s != 0.0 {
            return Err(format!("{}: the first segment starts at 0, got {from_s}", at("from_s")));
        }
        if k > 0 && from_s <= segments[k - 1].from_s {
            let before = segments[k - 1].from_s;
            return Err(format!("{}: expected after {before} (segments[{}]), got {from_s}", at("from_s"), k - 1));
        }
        if from_s >= duration_s {
            return Err(format!("{}: expected before duration_s {duration_s}, got {from_s}", at("from_s")));
        }
    }
    Ok(())
}
