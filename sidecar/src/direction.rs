//! The check that the proxy's listener direction agrees with the configured role, on a worker's
//! first request.

use crate::config::FilterRole;
use crate::host::{Attribute, Exchange, Host, LogLevel};

/// On a worker's first request (`checked` false; then set): warn when the listener direction
/// contradicts the configured role. The role stays as configured: a plain Envoy's listeners have
/// no direction, and the configuration is the operator's word.
pub fn check_direction_once(checked: &mut bool, role: FilterRole, host: &impl Host, exchange: &impl Exchange) {
    if std::mem::replace(checked, true) {
        return;
    }
    let Some(direction) = exchange.number_attribute(Attribute::ListenerDirection) else { return };
    if role.contradicted_by(direction) {
        let listener = if direction == 1 { "an inbound" } else { "an outbound" };
        host.log(
            LogLevel::Warn,
            &format!(
                "role \"{}\" runs on {listener} listener (is the WasmPlugin's `match` mode right?); keeping the \
                 configured role",
                role.name()
            ),
        );
    }
}
