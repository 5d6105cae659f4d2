//! Prints the ANE rule violations of MIL files: `cargo run -p anedvd-mil --example milcheck FILE...`.

use anedvd_mil::rules::{check, RuleConfig};

fn main() -> anyhow::Result<()> {
    for path in std::env::args().skip(1) {
        let p = anedvd_mil::parse(&std::fs::read_to_string(&path)?)?;
        let v = check(&p, None, &RuleConfig::default());
        let mut ids: Vec<String> = v.iter().map(|v| v.rule.to_string()).collect();
        ids.dedup();
        println!(
            "{path}: {}",
            if ids.is_empty() {
                "ok".to_string()
            } else {
                ids.join(" ")
            }
        );
    }
    Ok(())
}
