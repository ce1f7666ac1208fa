//! A benchmark's parameters from `MOONIN_BENCH_*` variables, and the command line that
//! repeats a run (printed at the top of its report).

/// A positive integer from `name`, `default` when it is not set.
pub fn positive(name: &str, default: u64) -> Result<u64, String> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => match v.parse::<u64>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{name}={v:?}: expected a positive integer")),
        },
    }
}

/// A switch from `name` (`1`/`true`/`yes` or `0`/`false`/`no`), `default` when it is not set
/// or empty.
pub fn flag(name: &str, default: bool) -> Result<bool, String> {
    match std::env::var(name).as_deref() {
        Err(_) | Ok("") => Ok(default),
        Ok("1" | "true" | "yes") => Ok(true),
        Ok("0" | "false" | "no") => Ok(false),
        Ok(v) => Err(format!("{name}={v:?}: expected 1 or 0")),
    }
}

/// `NAME=value … cargo bench --bench <bench>` with those of `names` that are set.
pub fn command_line(bench: &str, names: &[&str]) -> String {
    let mut env = String::new();
    for name in names {
        if let Ok(v) = std::env::var(name) {
            env.push_str(&format!("{name}={v} "));
        }
    }
    format!("{env}cargo bench --bench {bench}")
}
