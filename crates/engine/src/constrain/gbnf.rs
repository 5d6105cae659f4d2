//! GBNF (llama.cpp's grammar format) translated to llguidance's Lark syntax.
//! (Being written: placeholder until the translator lands.)

/// Placeholder.
pub fn gbnf_to_lark(_src: &str) -> Result<String, String> {
    Err("GBNF grammars are not supported yet".into())
}
