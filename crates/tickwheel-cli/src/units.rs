//! How the CLI writes quantities for people to read; a leaf module that every report uses.

/// A timer count the way people read it: `10^4`, `6·10^6`, `2500`.
pub fn pretty_n(n: usize) -> String {
    let digits = n.to_string();
    let trimmed = digits.trim_end_matches('0');
    let zeros = digits.len() - trimmed.len();
    match (trimmed, zeros) {
        (_, 0..=2) => digits,
        ("1", z) => format!("10^{z}"),
        (t, z) if t.len() == 1 => format!("{t}·10^{z}"),
        _ => digits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_print_as_powers() {
        assert_eq!(pretty_n(10_000), "10^4");
        assert_eq!(pretty_n(6_000_000), "6·10^6");
        assert_eq!(pretty_n(2_500), "2500");
        assert_eq!(pretty_n(100), "100");
        assert_eq!(pretty_n(1000), "10^3");
    }
}
