//! Prints a MIL file in canonical form: `cargo run -p anedvd-mil --example milfmt FILE`.

fn main() -> anyhow::Result<()> {
    let path = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: milfmt FILE"))?;
    let src = std::fs::read_to_string(path)?;
    print!("{}", anedvd_mil::print(&anedvd_mil::parse(&src)?));
    Ok(())
}
