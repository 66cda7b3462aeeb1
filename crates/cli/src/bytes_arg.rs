//! Keys typed at a terminal: text, with `\xHH` for any byte and `\\` for a backslash
//! (the inverse of how keys are shown, Rust's `escape_ascii`).

/// The bytes `text` stands for, or what is wrong with it and where.
pub(crate) fn parse_bytes(text: &str) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.char_indices().peekable();
    while let Some((at, c)) = rest.next() {
        if c != '\\' {
            let mut buffer = [0u8; 4];
            bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            continue;
        }
        match rest.next() {
            Some((_, '\\')) => bytes.push(b'\\'),
            Some((_, 'n')) => bytes.push(b'\n'),
            Some((_, 't')) => bytes.push(b'\t'),
            Some((_, '\'')) => bytes.push(b'\''),
            Some((_, '"')) => bytes.push(b'"'),
            Some((_, 'x')) => {
                let hex: String = (0..2).filter_map(|_| rest.next().map(|(_, c)| c)).collect();
                let byte = (hex.len() == 2)
                    .then(|| u8::from_str_radix(&hex, 16).ok())
                    .flatten()
                    .ok_or_else(|| {
                        format!("{text:?}: \\x at byte {at} needs two hex digits, got {hex:?}")
                    })?;
                bytes.push(byte);
            }
            Some((_, other)) => {
                return Err(format!(
                    "{text:?}: unknown escape \\{other} at byte {at} (use \\xHH, \\\\, \\n, \\t)"
                ));
            }
            None => return Err(format!("{text:?}: a lone \\ at the end")),
        }
    }
    Ok(bytes)
}

/// The untyped entity group a `--group` flag names, if given.
pub(crate) fn group_flag(text: Option<&str>) -> anyhow::Result<Option<megastore_types::EgId>> {
    text.map(|t| {
        let name = parse_bytes(t).map_err(|e| anyhow::anyhow!("--group: {e}"))?;
        megastore_client::group(&name).map_err(|e| anyhow::anyhow!("--group: {e}"))
    })
    .transpose()
}

/// How bytes are shown: printable ASCII as is, everything else escaped.
pub(crate) fn show_bytes(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_round_trip() {
        for bytes in [
            b"plain".to_vec(),
            vec![0, 1, 0xff, b'\\', b'"', b'\''],
            b"a\nb\tc".to_vec(),
            "héllo".as_bytes().to_vec(),
        ] {
            assert_eq!(parse_bytes(&show_bytes(&bytes)).unwrap(), bytes);
        }
        assert_eq!(parse_bytes("héllo").unwrap(), "héllo".as_bytes());
    }

    #[test]
    fn bad_escapes_are_named_with_their_place() {
        let error = parse_bytes(r"ab\xZ1").unwrap_err();
        assert!(error.contains("byte 2") && error.contains("hex"), "{error}");
        assert!(parse_bytes(r"ab\x1").is_err());
        assert!(parse_bytes(r"ab\q").unwrap_err().contains("\\q"));
        assert!(parse_bytes("ab\\").unwrap_err().contains("lone"));
    }
}
