//! What every target checks of what it is given back.

/// An error a user sees is one line.
pub fn one_line(error: impl std::fmt::Display) {
    let line = error.to_string();
    assert!(!line.contains('\n') && !line.is_empty(), "not one line: {line:?}");
}
