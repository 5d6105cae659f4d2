//! The `anedvd` command-line tool.
fn main() {}
