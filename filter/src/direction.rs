//! The check that Envoy's listener direction agrees with the configured role, on a VM's first
//! request.

use crate::abi::LogLevel;
use crate::host;
use tailweight_picker::config::FilterRole;

/// On a VM's first request (`checked` false; then set): warn when Envoy's listener direction
/// contradicts the configured role. The role stays as configured: a plain Envoy's listeners have no
/// direction, and the configuration is the operator's word.
pub fn check_direction_once(checked: &mut bool, role: FilterRole) {
    if std::mem::replace(checked, true) {
        return;
    }
    // Envoy 1.40 serves it as `xds.listener_direction`; older hosts as `listener_direction`.
    let direction =
        host::property_u64(b"xds\0listener_direction").or_else(|| host::property_u64(b"listener_direction"));
    let Some(direction) = direction else { return };
    if role.contradicted_by(direction) {
        let listener = if direction == 1 { "an inbound" } else { "an outbound" };
        host::log(
            LogLevel::Warn,
            &format!(
                "role \"{}\" runs on {listener} listener (is the WasmPlugin's `match` mode right?); keeping the \
                 configured role",
                role.name()
            ),
        );
    }
}
