//! The state a VM's root context and its HTTP contexts share: what its configuration made of it.

use crate::stamper::Stamper;
use crate::worker::Worker;
use std::cell::RefCell;
use std::rc::Rc;

#[derive(Default)]
pub enum PluginState {
    #[default]
    Unconfigured,
    /// Invalid configuration: every request passes untouched.
    Disabled,
    /// Client role: steers, reports, reads load stamps.
    Active(Box<Worker>),
    /// Server role: stamps responses (see `server`).
    Stamping(Box<Stamper>),
}

/// One VM is single-threaded: the root and its HTTP contexts share state without locks.
pub type Shared = Rc<RefCell<PluginState>>;
