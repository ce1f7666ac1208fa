//! The registry of controllers `moonin run --controllers` can select.

use crate::runtime::context::Registered;

/// Every controller built into this binary.
pub fn registry() -> Vec<Registered> {
    vec![
        crate::discovery::controller::registered(),
        crate::scaling::controller::registered(),
        crate::sandbox::controller::registered(),
    ]
}

/// Resolves `--controllers` against the registry: empty means all registered ones.
pub fn select(requested: &[String]) -> Result<Vec<Registered>, String> {
    let mut available = registry();
    if requested.is_empty() {
        return Ok(available);
    }
    let names: Vec<&str> = available.iter().map(|r| r.name).collect();
    for want in requested {
        if !names.contains(&want.as_str()) {
            let list = if names.is_empty() {
                "none yet".to_string()
            } else {
                names.join(", ")
            };
            return Err(format!(
                "unknown controller {want:?}: this build has {list}"
            ));
        }
    }
    available.retain(|r| requested.iter().any(|w| w == r.name));
    Ok(available)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_controllers_are_refused_by_name() {
        let err = select(&["nope".to_string()]).err().unwrap_or_default();
        assert!(err.contains("\"nope\""), "{err}");
        assert_eq!(select(&[]).map(|v| v.len()).ok(), Some(registry().len()));
    }
}
